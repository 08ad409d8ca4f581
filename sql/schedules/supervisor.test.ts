// schedules.schedule_supervisor: due fire times become tasks (once each), missed runs
// follow the schedule's policy, and the supervisor keeps exactly one successor pending.
// The clock moves through the owner-only *_at functions; the worker's side is played by
// claiming with queues.claim_tasks_at and completing as the worker.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { claimDue, runAsWorker } from '../test-support/drive.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** Every test starts from no schedules and no tasks (owner cleanup; facts are deletable). */
beforeEach(async () => {
  await db.query('truncate schedules.schedule, schedules.supervisor_task, queues.task cascade');
});

const at = (s: string) => new Date(s);

async function upsertAt(
  now: string,
  name: string,
  cron: string,
  taskType: string,
  policy: string | null = null,
  payload = {},
) {
  const { rows } = await db.query('select * from schedules.upsert_schedule_at($1, $2, $3, $4, $5, null, $6)', [
    now,
    name,
    cron,
    taskType,
    JSON.stringify(payload),
    policy,
  ]);
  expect(rows[0].validation_failure_message).toBeNull();
  return rows[0];
}

/** Pending supervisor tasks not under a live lease, soonest first. */
async function pendingSupervisors(): Promise<{ task_id: string; available_at: Date }[]> {
  const { rows } = await db.query<{ task_id: string; available_at: Date }>(
    `select p.task_id::text, p.available_at from queues.task_pending p
      where p.task_id in (select task_id from schedules.supervisor_task) order by p.available_at, p.task_id`,
  );
  return rows;
}

/** Claims the supervisor tasks due at `now`, runs each with that clock, completes them. */
async function runSupervisorAt(now: Date) {
  const tasks = await claimDue(db, now, ['db_function']);
  const results = [];
  for (const task of tasks) {
    expect(task.payload.db_function).toBe('schedules.schedule_supervisor');
    const { rows } = await db.query('select schedules.schedule_supervisor_at($1, $2) as r', [now, task.payload]);
    await db
      .pool('worker')
      .query('select queues.complete_task($1, $2, $3)', [
        task.task_id,
        task.task_lease_id,
        rows[0].r.success ? 'succeeded' : 'failed',
      ]);
    results.push(rows[0].r);
  }
  return results;
}

interface RunRow {
  name: string;
  outcome: string;
  first_fire_at: Date;
  fire_at: Date;
  task_type: string | null;
  scheduled_at: Date | null;
  priority: number | null;
}

async function runs(name?: string) {
  const { rows } = await db.query<RunRow>(
    `select s.name, r.outcome, r.first_fire_at, r.fire_at, t.task_type, t.scheduled_at, t.priority
       from schedules.schedule_run r join schedules.schedule s using (schedule_id)
       left join queues.task t on t.task_id = r.task_id
      where $1::text is null or s.name = $1 order by r.fire_at, s.name`,
    [name ?? null],
  );
  return rows.map((r) => ({
    ...r,
    first_fire_at: r.first_fire_at.toISOString(),
    fire_at: r.fire_at.toISOString(),
    scheduled_at: r.scheduled_at?.toISOString() ?? null,
  }));
}

describe('the seed schedules over a week', () => {
  it('weekly store_discovery, 4-hourly product_resync and daily analytics_refresh fire on time, once each', async () => {
    // 2024-01-01 is a Monday.
    await upsertAt('2024-01-01T00:00:30Z', 'store_discovery', '0 3 * * 1', 'store_discovery');
    await upsertAt('2024-01-01T00:00:30Z', 'product_resync', '0 */4 * * *', 'product_resync', 'catch_up_once');
    await upsertAt('2024-01-01T00:00:30Z', 'analytics_refresh', '0 2 * * *', 'analytics_refresh');
    // The kickoff enqueued one supervisor, within max_supervisor_sleep (1 hour).
    expect(await pendingSupervisors()).toEqual([
      { task_id: expect.any(String), available_at: at('2024-01-01T01:00:30Z') },
    ]);

    // Play the worker: run the supervisor whenever its task comes due, for 8 days.
    let supervisorRuns = 0;
    for (;;) {
      const pending = await pendingSupervisors();
      expect(pending).toHaveLength(1); // always exactly one successor
      const when = pending[0].available_at;
      if (when > at('2024-01-09T00:00:00Z')) break;
      const results = await runSupervisorAt(when);
      expect(results).toHaveLength(1);
      expect(results[0].success).toBe(true);
      supervisorRuns++;
    }
    const all = await runs();
    expect(all.filter((r) => r.name === 'store_discovery').map((r) => r.fire_at)).toEqual([
      '2024-01-01T03:00:00.000Z',
      '2024-01-08T03:00:00.000Z',
    ]);
    const resync = all.filter((r) => r.name === 'product_resync');
    expect(resync).toHaveLength(8 * 6);
    expect(resync.slice(0, 7).map((r) => r.fire_at)).toEqual([
      '2024-01-01T04:00:00.000Z',
      '2024-01-01T08:00:00.000Z',
      '2024-01-01T12:00:00.000Z',
      '2024-01-01T16:00:00.000Z',
      '2024-01-01T20:00:00.000Z',
      '2024-01-02T00:00:00.000Z',
      '2024-01-02T04:00:00.000Z',
    ]);
    const daily = all.filter((r) => r.name === 'analytics_refresh');
    expect(daily.map((r) => r.fire_at)).toEqual([1, 2, 3, 4, 5, 6, 7, 8].map((d) => `2024-01-0${d}T02:00:00.000Z`));
    // Each run enqueued its own task, of the schedule's type, scheduled at its fire time.
    for (const r of all) {
      expect(r).toMatchObject({
        outcome: 'enqueued',
        task_type: r.name,
        scheduled_at: r.fire_at,
        first_fire_at: r.fire_at,
      });
    }
    // The supervisor slept until the next fire time, or at most an hour.
    expect(supervisorRuns).toBeLessThanOrEqual(8 * 24 + 1);
    expect(supervisorRuns).toBeGreaterThan(8 * 6);
    // The scheduled tasks are claimable by role, like any task.
    const claimed = await claimDue(db, at('2024-01-09T00:00:00Z'), ['store_discovery']);
    expect(claimed).toHaveLength(2);
  });
});

describe('missed runs', () => {
  it("'skip': fire times older than the 10 minute grace are skipped as one fact; later ones run", async () => {
    await upsertAt('2024-01-01T10:00:30Z', 'every10', '*/10 * * * *', 'product_resync', 'skip');
    // The supervisor was down until 12:03.
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T12:03:00Z', '{}')`);
    expect(await runs()).toEqual([
      expect.objectContaining({
        outcome: 'skipped',
        first_fire_at: '2024-01-01T10:10:00.000Z',
        fire_at: '2024-01-01T11:50:00.000Z',
        task_type: null,
      }),
      expect.objectContaining({
        outcome: 'enqueued',
        first_fire_at: '2024-01-01T12:00:00.000Z',
        fire_at: '2024-01-01T12:00:00.000Z',
      }),
    ]);
    // Late by 15 minutes: 12:10 is past the grace (12:15), 12:20 is within it.
    const { rows } = await db.query(`select schedules.schedule_supervisor_at('2024-01-01T12:25:00Z', '{}') as r`);
    expect(rows[0].r.payload).toMatchObject({ enqueued: 1, skipped: 1 });
    expect((await runs()).slice(2)).toEqual([
      expect.objectContaining({
        outcome: 'skipped',
        first_fire_at: '2024-01-01T12:10:00.000Z',
        fire_at: '2024-01-01T12:10:00.000Z',
      }),
      expect.objectContaining({ outcome: 'enqueued', fire_at: '2024-01-01T12:20:00.000Z' }),
    ]);
    // Within the grace, every fire time is its own run (the grace boundary included, below).
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T12:49:00Z', '{}')`);
    // (12:30 is older than the grace at 12:49, which starts at 12:39.)
    expect((await runs()).slice(4).map((r) => [r.outcome, r.fire_at])).toEqual([
      ['skipped', '2024-01-01T12:30:00.000Z'],
      ['enqueued', '2024-01-01T12:40:00.000Z'],
    ]);
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T13:00:00Z', '{}')`);
    expect((await runs()).slice(6).map((r) => [r.outcome, r.fire_at])).toEqual([
      ['enqueued', '2024-01-01T12:50:00.000Z'],
      ['enqueued', '2024-01-01T13:00:00.000Z'],
    ]);
  });

  it("'catch_up_once': one task for every missed fire time together", async () => {
    await upsertAt('2024-01-01T00:00:30Z', 'hourly', '0 * * * *', 'analytics_refresh', 'catch_up_once');
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T05:30:00Z', '{}')`);
    expect(await runs()).toEqual([
      expect.objectContaining({
        outcome: 'enqueued',
        first_fire_at: '2024-01-01T01:00:00.000Z',
        fire_at: '2024-01-01T05:00:00.000Z',
        scheduled_at: '2024-01-01T05:00:00.000Z',
      }),
    ]);
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T06:00:00Z', '{}')`);
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T06:30:00Z', '{}')`);
    expect((await runs()).slice(1)).toEqual([
      expect.objectContaining({ first_fire_at: '2024-01-01T06:00:00.000Z', fire_at: '2024-01-01T06:00:00.000Z' }),
    ]);
    const { rows } = await db.query(`select count(*)::int as n from queues.task where task_type = 'analytics_refresh'`);
    expect(rows[0].n).toBe(2);
  });

  it('fire times while disabled never run; re-enabling counts from then', async () => {
    await upsertAt('2024-01-01T00:00:30Z', 'paused', '0 * * * *', 'analytics_refresh', 'catch_up_once');
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T01:00:00Z', '{}')`);
    await db.query(`select * from schedules.set_schedule_enabled_at('2024-01-01T01:30:00Z', 'paused', false)`);
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T05:00:00Z', '{}')`);
    await db.query(`select * from schedules.set_schedule_enabled_at('2024-01-01T05:10:00Z', 'paused', true)`);
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T06:00:00Z', '{}')`);
    expect((await runs()).map((r) => [r.first_fire_at, r.fire_at])).toEqual([
      ['2024-01-01T01:00:00.000Z', '2024-01-01T01:00:00.000Z'],
      ['2024-01-01T06:00:00.000Z', '2024-01-01T06:00:00.000Z'],
    ]);
  });

  it('a cron change counts from the change; a payload change neither skips nor repeats', async () => {
    await upsertAt('2024-01-01T00:00:30Z', 'edit', '0 * * * *', 'analytics_refresh', 'catch_up_once', { v: 1 });
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T01:00:00Z', '{}')`);
    await upsertAt('2024-01-01T01:30:00Z', 'edit', '0 * * * *', 'analytics_refresh', 'catch_up_once', { v: 2 });
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T02:00:00Z', '{}')`);
    await upsertAt('2024-01-01T02:10:00Z', 'edit', '*/5 * * * *', 'analytics_refresh', 'catch_up_once', { v: 3 });
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T02:15:00Z', '{}')`);
    const { rows } = await db.query(
      `select r.first_fire_at, r.fire_at, t.payload from schedules.schedule_run r join queues.task t using (task_id) order by r.fire_at`,
    );
    expect(rows.map((r) => [r.first_fire_at.toISOString(), r.fire_at.toISOString(), r.payload])).toEqual([
      ['2024-01-01T01:00:00.000Z', '2024-01-01T01:00:00.000Z', { v: 1 }],
      ['2024-01-01T02:00:00.000Z', '2024-01-01T02:00:00.000Z', { v: 2 }],
      ['2024-01-01T02:15:00.000Z', '2024-01-01T02:15:00.000Z', { v: 3 }],
    ]);
  });
});

describe('at most once', () => {
  it('two supervisors at once enqueue each fire time once', async () => {
    await upsertAt('2024-01-01T00:00:30Z', 'a', '*/5 * * * *', 'product_resync', 'skip');
    await upsertAt('2024-01-01T00:00:30Z', 'b', '0 * * * *', 'analytics_refresh', 'catch_up_once');
    const one = await db.client('owner');
    const two = await db.client('owner');
    try {
      await one.query('begin');
      await two.query('begin');
      await one.query(`select schedules.schedule_supervisor_at('2024-01-01T01:02:00Z', '{}')`);
      // The second waits on the first (advisory lock), then sees its runs.
      const second = two.query(`select schedules.schedule_supervisor_at('2024-01-01T01:02:00Z', '{}') as r`);
      await new Promise((r) => setTimeout(r, 200));
      await one.query('commit');
      const { rows } = await second;
      await two.query('commit');
      expect(rows[0].r.payload).toMatchObject({ enqueued: 0, skipped: 0 });
    } finally {
      await one.end();
      await two.end();
    }
    const all = await runs();
    // 'a' (skip): 00:05-00:50 are older than the grace (00:52), 00:55 and 01:00 run.
    expect(all.filter((r) => r.name === 'a').map((r) => [r.outcome, r.first_fire_at, r.fire_at])).toEqual([
      ['skipped', '2024-01-01T00:05:00.000Z', '2024-01-01T00:50:00.000Z'],
      ['enqueued', '2024-01-01T00:55:00.000Z', '2024-01-01T00:55:00.000Z'],
      ['enqueued', '2024-01-01T01:00:00.000Z', '2024-01-01T01:00:00.000Z'],
    ]);
    expect(all.filter((r) => r.name === 'b')).toHaveLength(1);
    const { rows: tasks } = await db.query(
      `select count(*)::int as n from queues.task where task_type in ('product_resync', 'analytics_refresh')`,
    );
    expect(tasks[0].n).toBe(all.filter((r) => r.outcome === 'enqueued').length);
  });

  it('the unique (schedule_id, fire_at) fact refuses a second run of a fire time', async () => {
    await upsertAt('2024-01-01T00:00:30Z', 'u', '0 * * * *', 'analytics_refresh');
    await db.query(`select schedules.schedule_supervisor_at('2024-01-01T01:00:00Z', '{}')`);
    await expect(
      db.query(
        `insert into schedules.schedule_run (schedule_id, schedule_version_id, fire_at, first_fire_at, outcome)
         select schedule_id, schedule_version_id, fire_at, fire_at, 'skipped' from schedules.schedule_run`,
      ),
    ).rejects.toMatchObject({ code: '23505' });
  });
});

describe('a failing schedule', () => {
  it('rolls back alone; the others run, the envelope names it, and the chain goes on', async () => {
    await upsertAt('2024-01-01T00:00:30Z', 'fine', '0 * * * *', 'analytics_refresh');
    await upsertAt('2024-01-01T00:00:30Z', 'broken', '0 * * * *', 'store_discovery');
    // Make enqueueing store_discovery fail (this test database only).
    await db.query(`create function public.refuse_store_discovery() returns trigger language plpgsql as $$
                    begin raise exception 'store_discovery refused' using errcode = '22023'; end $$`);
    await db.query(`create trigger refuse before insert on queues.task for each row
                    when (new.task_type = 'store_discovery') execute function public.refuse_store_discovery()`);
    try {
      const [result] = await runSupervisorAt(at('2024-01-01T01:00:30Z'));
      expect(result).toMatchObject({
        success: false,
        error: expect.stringMatching(/^1 schedule\(s\) failed: .*broken.*store_discovery refused/),
        payload: { enqueued: 1, errors: [{ name: 'broken', error: 'store_discovery refused', sqlstate: '22023' }] },
      });
      expect((await runs()).map((r) => r.name)).toEqual(['fine']);
      // The successor, and the failed run itself, which the queue retries (3 attempts).
      expect(await pendingSupervisors()).toHaveLength(2);
    } finally {
      await db.query('drop trigger refuse on queues.task');
      await db.query('drop function public.refuse_store_discovery()');
    }
    // Once the fault is gone, the missed hour is handled by the policy (skip: too old).
    await runSupervisorAt(at('2024-01-01T02:00:30Z'));
    // The successor at the next fire time (the queue's retry of the failed run waits on
    // the real clock, which complete_task uses, so it is not due in this test's clock).
    expect((await pendingSupervisors()).map((p) => p.available_at)).toContainEqual(at('2024-01-01T03:00:00Z'));
    expect((await runs('broken')).map((r) => [r.outcome, r.fire_at])).toEqual([
      ['skipped', '2024-01-01T01:00:00.000Z'],
      ['enqueued', '2024-01-01T02:00:00.000Z'],
    ]);
  });
});

describe('the supervisor chain', () => {
  it('ensure_schedule_supervisor is idempotent and returns the pending task; null with no schedules', async () => {
    const none = await db.pool('app').query('select schedules.ensure_schedule_supervisor() as id');
    expect(none.rows[0].id).toBeNull();
    await db
      .pool('app')
      .query(`select * from schedules.upsert_schedule('x', '* * * * *', 'analytics_refresh', '{}', null, null)`);
    const ids = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const { rows } = await db
        .pool(i % 2 ? 'api' : 'app')
        .query('select schedules.ensure_schedule_supervisor() as id');
      ids.add(rows[0].id);
    }
    expect(ids.size).toBe(1);
    expect((await pendingSupervisors()).map((p) => p.task_id)).toEqual([...ids]);
  });

  it('a schedule due sooner than the pending supervisor gets an earlier one; extra chains die out', async () => {
    await upsertAt('2024-01-01T00:00:30Z', 'daily', '0 2 * * *', 'analytics_refresh');
    expect((await pendingSupervisors()).map((p) => p.available_at)).toEqual([at('2024-01-01T01:00:30Z')]);
    await upsertAt('2024-01-01T00:01:00Z', 'soon', '10 0 * * *', 'analytics_refresh');
    expect((await pendingSupervisors()).map((p) => p.available_at)).toEqual([
      at('2024-01-01T00:10:00Z'),
      at('2024-01-01T01:00:30Z'),
    ]);
    await runSupervisorAt(at('2024-01-01T00:10:00Z'));
    // The 00:10 run found the 01:00:30 task pending before its own next wake: no new task.
    expect((await pendingSupervisors()).map((p) => p.available_at)).toEqual([at('2024-01-01T01:00:30Z')]);
    await runSupervisorAt(at('2024-01-01T01:00:30Z'));
    expect((await pendingSupervisors()).map((p) => p.available_at)).toEqual([at('2024-01-01T02:00:00Z')]);
    // Two chains claimed together: one successor.
    await db.query(
      `with t as (select queues.enqueue('db_function', '{"db_function": "schedules.schedule_supervisor"}', '2024-01-01T02:00:00Z') as id)
       insert into schedules.supervisor_task (task_id, scheduled_at) select id, '2024-01-01T02:00:00Z' from t`,
    );
    expect(await pendingSupervisors()).toHaveLength(2);
    const results = await runSupervisorAt(at('2024-01-01T02:00:00Z'));
    expect(results).toHaveLength(2);
    expect(await pendingSupervisors()).toHaveLength(1);
    expect((await runs('daily')).map((r) => r.fire_at)).toEqual(['2024-01-01T02:00:00.000Z']);
  });

  it('stops when no schedule is enabled, and the worker runs it through internal.run_function', async () => {
    await db
      .pool('app')
      .query(`select * from schedules.upsert_schedule('w', '0 0 1 1 *', 'analytics_refresh', '{}', null, null)`);
    const result = await runAsWorker(db, 'schedules.schedule_supervisor', {
      db_function: 'schedules.schedule_supervisor',
    });
    expect(result).toMatchObject({
      success: true,
      payload: { status: 'ok', enqueued: 0, next_supervisor_task_id: expect.any(Number) },
    });
    await db.pool('app').query(`select * from schedules.disable_schedule('w')`);
    const { rows } = await db.query(`select schedules.schedule_supervisor_at(now() + interval '2 hours', '{}') as r`);
    expect(rows[0].r.payload).toMatchObject({ next_run_at: null });
    const ensured = await db.pool('app').query('select schedules.ensure_schedule_supervisor() as id');
    // The one enqueued at the upsert is still pending; nothing new is added.
    expect(await pendingSupervisors()).toHaveLength(1);
    expect(ensured.rows[0].id).toBe((await pendingSupervisors())[0].task_id);
  });
});
