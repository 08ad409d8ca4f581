// Managing schedules: upsert_schedule / enable_schedule / disable_schedule /
// list_schedules, called as the app and the REST API; validation failures are returned,
// not raised, and write nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { rowCounts } from '../test-support/drive.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

interface Upserted {
  schedule_id: string | null;
  schedule_version_id: string | null;
  validation_failure_message: string | null;
}

async function upsertAt(now: string, args: unknown[]): Promise<Upserted> {
  const { rows } = await db.query<Upserted>('select * from schedules.upsert_schedule_at($1, $2, $3, $4, $5, $6, $7)', [
    now,
    ...args,
  ]);
  return rows[0];
}

async function versions(name: string) {
  const { rows } = await db.query(
    `select v.cron, v.task_type, v.payload, v.priority, v.missed_run_policy, v.enabled, v.fires_after
       from schedules.schedule_version v join schedules.schedule s using (schedule_id)
      where s.name = $1 order by v.schedule_version_id`,
    [name],
  );
  return rows;
}

describe('upsert_schedule', () => {
  it('creates a schedule as the app, enabled, with defaults, and kicks off the supervisor', async () => {
    const { rows } = await db
      .pool('app')
      .query<Upserted>(
        `select * from schedules.upsert_schedule('analytics-daily', '0 2 * * *', 'analytics_refresh', '{}', null, null)`,
      );
    expect(rows[0].validation_failure_message).toBeNull();
    expect(rows[0].schedule_id).not.toBeNull();
    const list = await db.pool('api').query(`select * from schedules.list_schedules() where name = 'analytics-daily'`);
    expect(list.rows[0]).toMatchObject({
      name: 'analytics-daily',
      cron: '0 2 * * *',
      task_type: 'analytics_refresh',
      payload: {},
      priority: 0,
      missed_run_policy: 'skip',
      enabled: true,
      last_fire_at: null,
    });
    const next: Date = list.rows[0].next_fire_at;
    expect(next.getUTCHours()).toBe(2);
    expect(next.getUTCMinutes()).toBe(0);
    expect(next.getTime()).toBeGreaterThan(Date.now() - 1000);
    // One pending supervisor task, as a db_function.
    const { rows: sup } = await db.query(
      `select t.task_type, t.payload from schedules.supervisor_task s join queues.task_pending p using (task_id)
         join queues.task t using (task_id)`,
    );
    expect(sup).toEqual([
      { task_type: 'db_function', payload: { task_type: 'db_function', db_function: 'schedules.schedule_supervisor' } },
    ]);
  });

  it('is idempotent: the same definition appends no version; the API may upsert too', async () => {
    const first = await upsertAt('2024-01-01T00:00:00Z', [
      'idem',
      '0 * * * *',
      'product_resync',
      { a: 1 },
      5,
      'catch_up_once',
    ]);
    const again = await db
      .pool('api')
      .query<Upserted>(
        `select * from schedules.upsert_schedule('idem', ' 0 * * * * ', 'product_resync', '{"a": 1}', 5, 'catch_up_once')`,
      );
    expect(again.rows[0]).toEqual(first);
    expect(await versions('idem')).toHaveLength(1);
  });

  it('a payload change keeps fires_after; a cron change moves it to now', async () => {
    await upsertAt('2024-01-01T00:00:00Z', ['edits', '0 * * * *', 'product_resync', {}, null, null]);
    await upsertAt('2024-01-02T00:00:00Z', ['edits', '0 * * * *', 'product_resync', { store: 1 }, null, null]);
    await upsertAt('2024-01-03T00:00:00Z', ['edits', '30 * * * *', 'product_resync', { store: 1 }, 7, 'catch_up_once']);
    const v = await versions('edits');
    expect(v.map((r) => [r.cron, r.payload, r.priority, r.missed_run_policy, r.fires_after.toISOString()])).toEqual([
      ['0 * * * *', {}, 0, 'skip', '2024-01-01T00:00:00.000Z'],
      ['0 * * * *', { store: 1 }, 0, 'skip', '2024-01-01T00:00:00.000Z'],
      ['30 * * * *', { store: 1 }, 7, 'catch_up_once', '2024-01-03T00:00:00.000Z'],
    ]);
  });

  it('disable and enable append versions; an update keeps a disabled schedule disabled', async () => {
    await upsertAt('2024-01-01T00:00:00Z', ['toggle', '0 0 * * *', 'analytics_refresh', {}, null, null]);
    const off = await db.query(
      `select * from schedules.set_schedule_enabled_at('2024-01-02T00:00:00Z', 'toggle', false)`,
    );
    expect(off.rows[0].validation_failure_message).toBeNull();
    await upsertAt('2024-01-03T00:00:00Z', ['toggle', '0 0 * * *', 'analytics_refresh', { v: 2 }, null, null]);
    await db.query(`select * from schedules.set_schedule_enabled_at('2024-01-04T00:00:00Z', 'toggle', true)`);
    // Enabling again is a no-op.
    await db.query(`select * from schedules.set_schedule_enabled_at('2024-01-05T00:00:00Z', 'toggle', true)`);
    expect((await versions('toggle')).map((r) => [r.enabled, r.payload, r.fires_after.toISOString()])).toEqual([
      [true, {}, '2024-01-01T00:00:00.000Z'],
      [false, {}, '2024-01-01T00:00:00.000Z'],
      [false, { v: 2 }, '2024-01-01T00:00:00.000Z'],
      [true, { v: 2 }, '2024-01-04T00:00:00.000Z'],
    ]);
    // As the app, with the real clock.
    const r = await db.pool('app').query(`select * from schedules.disable_schedule('toggle')`);
    expect(r.rows[0].validation_failure_message).toBeNull();
    const l = await db
      .pool('app')
      .query(`select enabled, next_fire_at from schedules.list_schedules() where name = 'toggle'`);
    expect(l.rows[0]).toEqual({ enabled: false, next_fire_at: null });
    const e = await db.pool('api').query(`select * from schedules.enable_schedule('toggle')`);
    expect(e.rows[0].validation_failure_message).toBeNull();
  });

  it('enable/disable of an unknown name returns a validation failure', async () => {
    const { rows } = await db.pool('app').query(`select * from schedules.disable_schedule('nope')`);
    expect(rows[0]).toEqual({
      schedule_id: null,
      schedule_version_id: null,
      validation_failure_message: `no schedule named 'nope'`,
    });
  });

  const bad: [string, unknown[], string | RegExp][] = [
    ['null name', [null, '* * * * *', 'analytics_refresh', {}, null, null], /^name is required/],
    [
      'bad name',
      ['Has Spaces', '* * * * *', 'analytics_refresh', {}, null, null],
      /^name is required: 1 to 100 characters/,
    ],
    ['null cron', ['n', null, 'analytics_refresh', {}, null, null], 'cron is required'],
    [
      'bad cron',
      ['n', '61 * * * *', 'analytics_refresh', {}, null, null],
      'cron minute field: 61 is out of range 0-59',
    ],
    ['4 fields', ['n', '* * * *', 'analytics_refresh', {}, null, null], /^cron must have 5 fields/],
    ['never fires', ['n', '0 0 31 2 *', 'analytics_refresh', {}, null, null], /never fires/],
    ['null task_type', ['n', '* * * * *', null, {}, null, null], 'task_type is required'],
    ['unknown task_type', ['n', '* * * * *', 'nope', {}, null, null], `unknown task_type 'nope'`],
    [
      'null payload',
      ['n', '* * * * *', 'analytics_refresh', null, null, null],
      'payload is required and must be a JSON object',
    ],
    [
      'array payload',
      ['n', '* * * * *', 'analytics_refresh', [1], null, null],
      'payload is required and must be a JSON object',
    ],
    [
      'priority',
      ['n', '* * * * *', 'analytics_refresh', {}, 1001, null],
      'priority must be between -1000 and 1000, got 1001',
    ],
    [
      'policy',
      ['n', '* * * * *', 'analytics_refresh', {}, null, 'always'],
      `missed_run_policy must be 'skip' or 'catch_up_once', got 'always'`,
    ],
  ];
  it.each(bad)('%s: returns the message as the app, writes nothing', async (_label, args, message) => {
    const before = await rowCounts(db, ['schedules', 'queues']);
    const { rows } = await db
      .pool('app')
      .query<Upserted>('select * from schedules.upsert_schedule($1, $2, $3, $4, $5, $6)', [
        args[0],
        args[1],
        args[2],
        args[3] === null ? null : JSON.stringify(args[3]),
        args[4],
        args[5],
      ]);
    expect(rows[0].schedule_id).toBeNull();
    expect(rows[0].validation_failure_message).toMatch(message);
    expect(await rowCounts(db, ['schedules', 'queues'])).toEqual(before);
  });

  // db_function schedules are the owner's to install (upsert_schedule_at); the owner
  // still gets a message for a function that is not runnable.
  it.each([
    [
      'db_function not runnable',
      ['n', '* * * * *', 'db_function', { db_function: 'public.evil' }, null, null],
      /^payload\.db_function must name a runnable function: function public\.evil\(jsonb\) does not exist/,
    ],
    [
      'db_function missing',
      ['n', '* * * * *', 'db_function', {}, null, null],
      /^payload\.db_function must name a runnable function: function_name must not be null/,
    ],
  ] as [string, unknown[], RegExp][])(
    '%s: returns the message to the owner, writes nothing',
    async (_label, args, message) => {
      const before = await rowCounts(db, ['schedules', 'queues']);
      const r = await upsertAt('2024-01-01T00:00:00Z', args);
      expect(r.schedule_id).toBeNull();
      expect(r.validation_failure_message).toMatch(message);
      expect(await rowCounts(db, ['schedules', 'queues'])).toEqual(before);
    },
  );

  it.each([
    ['app', 'db_function', { db_function: 'files.record_file_delete_success', file_deletion_attempt_id: 1 }],
    ['api', 'db_function', { db_function: 'internal.noop' }],
    ['app', 'file_delete', { bucket: 'b-bucket', object_key: 'someone/else' }],
    ['api', 'sms', { to_number: '+14155550100', body: 'hi' }],
  ] as const)('as %s, a %s schedule is refused with 42501, nothing written', async (dbUser, taskType, payload) => {
    const before = await rowCounts(db, ['schedules', 'queues']);
    await expect(
      db
        .pool(dbUser)
        .query('select * from schedules.upsert_schedule($1, $2, $3, $4, null, null)', [
          'evil',
          '* * * * *',
          taskType,
          JSON.stringify(payload),
        ]),
    ).rejects.toMatchObject({
      code: '42501',
      message: expect.stringContaining(`task_type '${taskType}' may be enqueued only by the database's own processes`),
    });
    expect(await rowCounts(db, ['schedules', 'queues'])).toEqual(before);
  });

  it('a runnable db_function is accepted', async () => {
    const r = await upsertAt('2024-01-01T00:00:00Z', [
      'noop',
      '*/5 * * * *',
      'db_function',
      { db_function: 'internal.noop' },
      null,
      null,
    ]);
    expect(r.validation_failure_message).toBeNull();
  });
});

describe('privileges', () => {
  it('the clock variants and helpers are owner only', async () => {
    for (const dbUser of ['app', 'api', 'worker'] as const) {
      await expect(
        db
          .pool(dbUser)
          .query(
            `select * from schedules.upsert_schedule_at(now(), 'x', '* * * * *', 'analytics_refresh', '{}', null, null)`,
          ),
      ).rejects.toMatchObject({ code: '42501' });
      await expect(db.pool(dbUser).query(`select schedules.schedule_supervisor_at(now(), '{}')`)).rejects.toMatchObject(
        {
          code: '42501',
        },
      );
      await expect(db.pool(dbUser).query(`select schedules.next_fire_time('* * * * *', now())`)).rejects.toMatchObject({
        code: '42501',
      });
      await expect(db.pool(dbUser).query(`select * from schedules.schedule`)).rejects.toMatchObject({ code: '42501' });
    }
    // The worker may run the supervisor but not manage schedules.
    await expect(
      db
        .pool('worker')
        .query(`select * from schedules.upsert_schedule('x', '* * * * *', 'analytics_refresh', '{}', null, null)`),
    ).rejects.toMatchObject({ code: '42501' });
    await expect(db.pool('app').query(`select schedules.schedule_supervisor('{}')`)).rejects.toMatchObject({
      code: '42501',
    });
  });

  it('facts are append-only', async () => {
    await expect(db.query(`update schedules.schedule_version set enabled = false`)).rejects.toMatchObject({
      code: '55000',
    });
    await expect(db.query(`update schedules.schedule set name = 'x'`)).rejects.toMatchObject({ code: '55000' });
  });
});
