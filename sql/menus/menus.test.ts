// The menus SQL: the daily staggered resync (the seed's table), store discovery on
// demand, the schedules installed by migration, and what the record function refuses.
// Called as the roles that call them in production.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const count = async (sql: string) => (await db.query(sql)).rows[0].n as number;
const taskCount = () => count(`select count(*)::int as n from queues.task`);

/** N active stores (platform id resolved, products discovered), as the chain leaves them. */
async function activeStores(n: number) {
  await db.query(`truncate menus.store, menus.resync_generated, queues.task restart identity cascade`);
  await db.query(
    `insert into menus.store (slug, name, menu_url) select 's-' || i, 'S' || i, 'u' || i from generate_series(1, $1::int) i`,
    [n],
  );
  await db.query(
    `insert into menus.store_platform_id (store_id, platform_dispensary_id) select store_id, 'd-' || store_id from menus.store`,
  );
  await db.query(
    `insert into menus.store_products_discovered (store_id, product_count) select store_id, 1 from menus.store`,
  );
}

describe('menus.generate_resync_tasks', () => {
  it("spreads 300 stores over six 4-hour batches: the seed's table", async () => {
    await activeStores(300);
    const { rows } = await db.pool('api').query(`select * from menus.generate_resync_tasks(6, '2026-01-05')`);
    expect(rows).toEqual(
      [0, 4, 8, 12, 16, 20].map((h, i) => ({
        batch: i + 1,
        scheduled_at: new Date(Date.UTC(2026, 0, 5, h)),
        task_count: 50,
      })),
    );
    const { rows: batches } = await db.query(`
      select extract(hour from t.scheduled_at at time zone 'UTC')::int as hour,
             min(s.slug_n)::int as first, max(s.slug_n)::int as last, count(*)::int as n,
             bool_and(t.resource_key = 'store:' || (t.payload ->> 'store_id')) as keyed,
             bool_and(t.max_attempts = 3 and t.priority = 0) as routine
        from queues.task t
        join lateral (select substr(slug, 3)::int as slug_n from menus.store where store_id = (t.payload ->> 'store_id')::bigint) s on true
       where t.task_type = 'product_resync' group by 1 order by 1`);
    expect(batches).toEqual(
      [0, 4, 8, 12, 16, 20].map((hour, i) => ({
        hour,
        first: i * 50 + 1,
        last: i * 50 + 50,
        n: 50,
        keyed: true,
        routine: true,
      })),
    );
  });

  it('uneven counts differ by at most one per batch; inactive stores are left out', async () => {
    await activeStores(8);
    await db.query(`insert into menus.store (slug, name, menu_url) values ('new', 'New', 'u')`); // no products yet
    const { rows } = await db.pool('app').query(`select task_count from menus.generate_resync_tasks(6, '2026-01-05')`);
    expect(rows.map((r) => r.task_count)).toEqual([2, 1, 1, 2, 1, 1]);
    expect(await taskCount()).toBe(8);
  });

  it('a date is generated once: the second call is refused and writes nothing', async () => {
    await activeStores(3);
    await db.pool('api').query(`select * from menus.generate_resync_tasks(6, '2026-01-05')`);
    await expect(
      db.pool('api').query(`select * from menus.generate_resync_tasks(3, '2026-01-05')`),
    ).rejects.toMatchObject({
      code: '23505',
      message: 'resync tasks for 2026-01-05 were generated already',
    });
    expect(await taskCount()).toBe(3);
    expect(await count(`select count(*)::int as n from menus.resync_generated`)).toBe(1);
  });

  it.each<[string, unknown[], string, string]>([
    ['null batches', [null, '2026-01-05'], '22004', 'batches must not be null'],
    ['0 batches', [0, '2026-01-05'], '22023', 'batches must be between 1 and 24, got 0'],
    ['25 batches', [25, '2026-01-05'], '22023', 'batches must be between 1 and 24, got 25'],
    ['null date', [6, null], '22004', 'date must not be null'],
    ['year 3000', [6, '3000-01-01'], '22023', 'date must be between 2000-01-01 and 2999-12-31, got 3000-01-01'],
  ])('refuses %s, writing nothing', async (_name, args, code, message) => {
    await activeStores(3);
    await expect(db.pool('api').query(`select * from menus.generate_resync_tasks($1, $2)`, args)).rejects.toMatchObject(
      { code, message },
    );
    expect(await taskCount()).toBe(0);
    expect(await count(`select count(*)::int as n from menus.resync_generated`)).toBe(0);
  });

  it('with no active store writes nothing and leaves the date free', async () => {
    await activeStores(0);
    const { rows } = await db.pool('api').query(`select task_count from menus.generate_resync_tasks(6, '2026-01-05')`);
    expect(rows.map((r) => r.task_count)).toEqual([0, 0, 0, 0, 0, 0]);
    expect(await count(`select count(*)::int as n from menus.resync_generated`)).toBe(0);
    await activeStores(2);
    const { rows: again } = await db
      .pool('api')
      .query(`select task_count from menus.generate_resync_tasks(6, '2026-01-05')`);
    expect(again.map((r) => r.task_count)).toEqual([1, 0, 0, 1, 0, 0]);
  });

  it("is not the worker role's to call", async () => {
    await expect(
      db.pool('worker').query(`select * from menus.generate_resync_tasks(6, '2026-01-05')`),
    ).rejects.toMatchObject({ code: '42501' });
  });
});

describe('menus.generate_store_discovery', () => {
  it('enqueues one store_discovery task (priority 20, 3 attempts); refuses a date over a year ahead', async () => {
    await db.query(`truncate queues.task cascade`);
    const { rows } = await db.pool('api').query(`select menus.generate_store_discovery(null)::text as id`);
    const { rows: task } = await db.query(
      `select task_type, payload, priority, max_attempts from queues.task where task_id = $1`,
      [rows[0].id],
    );
    expect(task).toEqual([{ task_type: 'store_discovery', payload: {}, priority: 20, max_attempts: 3 }]);
    await expect(
      db.pool('api').query(`select menus.generate_store_discovery(now() + interval '2 years')`),
    ).rejects.toMatchObject({
      code: '22023',
      message: expect.stringMatching(/^scheduled_at must be at most a year ahead/),
    });
    expect(await taskCount()).toBe(1);
  });
});

describe('schedules installed by the migration', () => {
  beforeEach(async () => {
    await db.query(`truncate queues.task, menus.resync_generated cascade`);
  });

  it('exist, disabled, with the seed cadence', async () => {
    const { rows } = await db
      .pool('api')
      .query(
        `select name, cron, task_type, enabled, payload from schedules.list_schedules() where name like 'menus.%' order by name`,
      );
    expect(rows).toEqual([
      {
        name: 'menus.analytics_refresh',
        cron: '0 2 * * *',
        task_type: 'analytics_refresh',
        enabled: false,
        payload: {},
      },
      {
        name: 'menus.resync',
        cron: '0 0 * * *',
        task_type: 'db_function',
        enabled: false,
        payload: { db_function: 'menus.generate_todays_resync' },
      },
      { name: 'menus.store_discovery', cron: '0 3 * * 1', task_type: 'store_discovery', enabled: false, payload: {} },
    ]);
  });

  it('once enabled (as local mode does), fire weekly discovery, the daily resync and the daily analytics refresh', async () => {
    const start = '2026-01-04T23:00:00Z'; // a Sunday
    for (const name of ['menus.store_discovery', 'menus.resync', 'menus.analytics_refresh']) {
      await db.query(`select * from schedules.set_schedule_enabled_at($1, $2, true)`, [start, name]);
    }
    // Monday 03:30: the supervisor has run at each fire time since (00:00, 02:00, 03:00).
    for (const at of ['2026-01-05T00:00:01Z', '2026-01-05T02:00:01Z', '2026-01-05T03:00:01Z']) {
      await db.query(`select schedules.schedule_supervisor_at($1, '{}')`, [at]);
    }
    const { rows } = await db.query(`
      select t.task_type, t.payload ->> 'db_function' as fn, t.scheduled_at from queues.task t
       where t.task_id in (select task_id from schedules.schedule_run where outcome = 'enqueued') order by t.scheduled_at`);
    expect(rows).toEqual([
      { task_type: 'db_function', fn: 'menus.generate_todays_resync', scheduled_at: new Date('2026-01-05T00:00:00Z') },
      { task_type: 'analytics_refresh', fn: null, scheduled_at: new Date('2026-01-05T02:00:00Z') },
      { task_type: 'store_discovery', fn: null, scheduled_at: new Date('2026-01-05T03:00:00Z') },
    ]);
    for (const name of ['menus.store_discovery', 'menus.resync', 'menus.analytics_refresh']) {
      await db.query(`select * from schedules.set_schedule_enabled_at(now(), $1, false)`, [name]);
    }
  });

  it("the daily step generates today's resync once, as the worker runs it", async () => {
    await activeStores(12);
    const run = () =>
      db.pool('worker').query(`select internal.run_function('menus.generate_todays_resync', '{}') as r`);
    const first = (await run()).rows[0].r;
    expect(first.success).toBe(true);
    expect(first.payload.batches.map((b: { task_count: number }) => b.task_count)).toEqual([2, 2, 2, 2, 2, 2]);
    const second = (await run()).rows[0].r;
    expect(second).toEqual({ status: 'already_generated', payload: { date: first.payload.date } });
    expect(await count(`select count(*)::int as n from queues.task where task_type = 'product_resync'`)).toBe(12);
  });
});

describe('menus.record_observation and queues.record_task_result refuse', () => {
  it('a lease that is not current, a task of another type, malformed observations and results', async () => {
    await activeStores(1);
    const { rows: ids } = await db.query(
      `select queues.enqueue('product_resync', '{"store_id": 1, "platform_dispensary_id": "d-1"}')::text as resync,
              queues.enqueue('db_function', '{"db_function": "internal.noop"}')::text as other`,
    );
    // Two claims: the tasks of one claim share its lease, so the other task's lease is one
    // this task never held only when it comes from another claim.
    const claim = async (type: string) =>
      (
        await db.pool('worker').query<{
          task_id: string;
          task_lease_id: string;
          task_type: string;
        }>(`select task_id::text, task_lease_id::text, task_type from queues.claim_tasks('w', 10, array[$1])`, [type])
      ).rows[0];
    const resync = await claim('product_resync');
    const other = await claim('db_function');
    expect(other.task_lease_id).not.toBe(resync.task_lease_id);
    const worker = db.pool('worker');
    const products = { products: [{ id: 'a', name: 'A', price_cents: 100, in_stock: true, quantity: 2 }] };
    const cases: [string, unknown[], string, RegExp][] = [
      [
        'menus.record_observation($1, $2, $3)',
        [resync.task_id, other.task_lease_id, products],
        '55000',
        /^lease \d+ is no longer the current lease of task \d+$/,
      ],
      [
        'menus.record_observation($1, $2, $3)',
        [other.task_id, other.task_lease_id, {}],
        '22023',
        /is a db_function task, not a menus task$/,
      ],
      [
        'menus.record_observation($1, $2, $3)',
        [resync.task_id, resync.task_lease_id, []],
        '22023',
        /^observation must be a JSON object, got array$/,
      ],
      [
        'menus.record_observation($1, $2, $3)',
        [resync.task_id, resync.task_lease_id, { products: [{ id: 'a' }] }],
        '22023',
        /^observation.products\[0\] must have id, name/,
      ],
      [
        'menus.record_observation($1, $2, $3)',
        [resync.task_id, resync.task_lease_id, { products: [{ ...products.products[0], price_cents: -1 }] }],
        '22023',
        /price_cents \(whole, >= 0\)/,
      ],
      [
        'queues.record_task_result($1, $2, $3)',
        [resync.task_id, other.task_lease_id, { a: 1 }],
        '55000',
        /no longer the current lease/,
      ],
      [
        'queues.record_task_result($1, $2, $3)',
        [resync.task_id, resync.task_lease_id, [1]],
        '22023',
        /^result must be a JSON object, got array$/,
      ],
      [
        'queues.record_task_result($1, $2, $3)',
        [resync.task_id, resync.task_lease_id, null],
        '22004',
        /^result must not be null$/,
      ],
    ];
    for (const [call, args, code, message] of cases) {
      // jsonb arguments as JSON text (node-pg would send a JS array as a PostgreSQL array).
      const sent = args.map((a, i) => (i === 2 && a !== null ? JSON.stringify(a) : a));
      await expect(worker.query(`select ${call}`, sent), call).rejects.toMatchObject({
        code,
        message: expect.stringMatching(message),
      });
    }
    expect(await count(`select count(*)::int as n from menus.product`)).toBe(0);
    expect(await count(`select count(*)::int as n from queues.task_result`)).toBe(0);

    // The right lease: recorded once; a second result for the same lease is refused.
    await worker.query(`select queues.record_task_result($1, $2, '{"ok": true}')`, [
      resync.task_id,
      resync.task_lease_id,
    ]);
    await expect(
      worker.query(`select queues.record_task_result($1, $2, '{"ok": 2}')`, [resync.task_id, resync.task_lease_id]),
    ).rejects.toMatchObject({ code: '23505' });
    // Results are readable by apps and the API, not by the worker; and never updated.
    const { rows } = await db
      .pool('app')
      .query(`select task_lease_id::text, result from queues.list_task_results($1)`, [resync.task_id]);
    expect(rows).toEqual([{ task_lease_id: resync.task_lease_id, result: { ok: true } }]);
    await expect(worker.query(`select * from queues.list_task_results($1)`, [resync.task_id])).rejects.toMatchObject({
      code: '42501',
    });
    await expect(db.query(`update queues.task_result set result = '{}'`)).rejects.toMatchObject({ code: '55000' });
    expect(ids).toHaveLength(1);
  });
});
