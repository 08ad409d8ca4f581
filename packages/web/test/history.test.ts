// History partitions and retention as operators see them: GET /api/history (the
// dashboard's History page reads it) and the queue_history_* gauges of GET /metrics,
// against a real test database as the API role: each set's state, sizes and oldest task,
// the next drop and what blocks it, the recent drops and the maintenance schedule's last
// run.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';

let db: TestDatabase;
const READ_TOKEN = 'test-token-0123456789abcdef';
const READ = { authorization: `Bearer ${READ_TOKEN}` };
let app: FastifyInstance;
beforeAll(async () => {
  db = await createTestDatabase();
  app = createApi({ databaseUrl: db.url('api'), apiToken: READ_TOKEN, logLevel: 'silent' });
  await app.ready();
});
afterAll(async () => {
  await app?.close();
  await db?.drop();
});

describe('history', () => {
  it('GET /api/history: partition sets with sizes, the oldest retained task and the next drop', async () => {
    // Sets of 10 ids above the migration's; 15 tasks, the first set completed a day ago.
    const { rows } = await db.query(
      `select max(upper_bound) as top from queues.history_partitions() where not is_default`,
    );
    const base = Number(rows[0].top);
    await db.query(`update queues.history_setting set partition_size = 10`);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [base - 1]);
    await db.query('select queues.maintain_history_at(now())');
    // As the owner: the app role may enqueue only the task types of its processes.
    const { rows: ids } = await db
      .pool('owner')
      .query('select task_id from queues.enqueue_many($1::jsonb)', [
        JSON.stringify(Array.from({ length: 15 }, () => ({ task_type: 'email', payload: { n: 1 } }))),
      ]);
    const firstSet = ids.slice(0, 10).map((r) => r.task_id);
    await db.pool('worker').query(`select queues.complete_tasks($1::bigint[], null, null)`, [firstSet]);
    // The migration's empty sets below the last id go; the completed set stays (recent).
    await db.query('select queues.maintain_history_at(now())');
    // A step skipped an hour and a half ago, and one now: the last hour counts one.
    await db.query(`delete from queues.history_step_skipped`);
    await db.query(
      `insert into queues.history_step_skipped (skipped_at, step, reason)
       values (now() - interval '90 minutes', 'detach queues.task_p1', 'could not lock'),
              (now(), 'attach queues.task_lease_p2', 'could not lock task_lease')`,
    );

    const res = await app.inject({ method: 'GET', headers: READ, url: '/api/history' });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({
      retention_seconds: 7 * 86400,
      partition_size: 10,
      oldest_task_id: base,
      last_task_id: base + 14,
      default_partition_tasks: 0,
      next_drop: { lower_bound: base, upper_bound: base + 10, pending_tasks: 0 },
      skipped_steps_last_hour: 1,
      last_skipped_step: { step: 'attach queues.task_lease_p2', reason: 'could not lock task_lease' },
    });
    const dropAfter = Date.parse(body.next_drop.drop_after);
    const lastCompleted = Date.parse(body.next_drop.last_completed_at);
    expect(dropAfter - lastCompleted).toBe(7 * 86400 * 1000);
    const set = body.partitions.find((p: { lower_bound: number }) => p.lower_bound === base);
    expect(set).toMatchObject({ upper_bound: base + 10, name: `task_p${base}`, is_default: false });
    expect(set.total_bytes).toBeGreaterThan(0);

    // Each set: its state, tasks, oldest task, pending tasks, creation, and bytes split.
    expect(body.lock_timeout_ms).toBe(2000);
    expect(set).toMatchObject({
      state: 'next_drop',
      tasks: 10,
      first_task_id: base,
      last_task_id: base + 9,
      pending_tasks: 0,
      created_at: expect.any(String),
    });
    expect(set.table_bytes).toBeGreaterThan(0);
    expect(set.index_bytes).toBeGreaterThan(0);
    expect(set.table_bytes + set.index_bytes).toBe(set.total_bytes);
    const byLower = (lo: number) => body.partitions.find((p: { lower_bound: number }) => p.lower_bound === lo);
    expect(byLower(base + 10)).toMatchObject({
      state: 'current',
      tasks: 5,
      first_task_id: base + 10,
      pending_tasks: 5,
    });
    expect(Date.parse(byLower(base + 10).first_enqueued_at)).toBeGreaterThan(Date.now() - 60_000);
    expect(byLower(base + 20)).toMatchObject({ state: 'ahead', tasks: 0, first_task_id: null, pending_tasks: 0 });
    expect(body.partitions.at(-1)).toMatchObject({ is_default: true, state: 'default', tasks: 0 });
    const sets = body.partitions.filter((p: { is_default: boolean }) => !p.is_default);
    expect(body.totals).toEqual({
      sets: sets.length,
      tasks: 15,
      table_bytes: body.partitions.reduce((n: number, p: { table_bytes: number }) => n + p.table_bytes, 0),
      index_bytes: body.partitions.reduce((n: number, p: { index_bytes: number }) => n + p.index_bytes, 0),
      total_bytes: body.partitions.reduce((n: number, p: { total_bytes: number }) => n + p.total_bytes, 0),
    });
    // The migration's empty sets below the first task went, newest drop first.
    expect(body.recent_drops.length).toBeGreaterThan(0);
    expect(
      body.recent_drops.every((d: { upper_bound: number; tasks: number }) => d.upper_bound <= base && d.tasks === 0),
    ).toBe(true);
    expect(body.recent_drops[0].lower_bound).toBeGreaterThan(body.recent_drops.at(-1).lower_bound - 1);
    // Test databases start with the maintenance schedule disabled, never run.
    expect(body.maintenance).toMatchObject({
      schedule: 'queue_history_maintenance',
      cron: '*/10 * * * *',
      enabled: false,
      last_run: null,
    });

    const metrics = (await app.inject({ method: 'GET', headers: READ, url: '/metrics' })).body;
    expect(metrics).toContain(
      `queue_history_partition_bytes{lower_bound="${base}",upper_bound="${base + 10}"} ${set.total_bytes}`,
    );
    expect(metrics).toMatch(/^queue_history_partitions \d+$/m);
    expect(metrics).toContain('queue_history_default_partition_tasks 0');
    expect(metrics).toContain('queue_history_skipped_steps_last_hour 1');
    expect(metrics).toContain(`queue_history_oldest_task_id ${base}`);
    expect(metrics).toContain(`queue_history_next_drop_timestamp_seconds ${dropAfter / 1000}`);
    expect(metrics).toContain('queue_history_retention_seconds 604800');
    expect(metrics).toContain(`queue_history_partition_tasks{lower_bound="${base}",upper_bound="${base + 10}"} 10`);
    expect(metrics).toContain(`queue_history_bytes{kind="table"} ${body.totals.table_bytes}`);
    expect(metrics).toContain(`queue_history_bytes{kind="index"} ${body.totals.index_bytes}`);
    expect(metrics).toContain('queue_history_next_drop_pending_tasks 0');
  });

  it('a pending task blocks the next drop (no drop time, its count instead); a drop and a maintenance run are shown', async () => {
    const { rows } = await db.query(
      `select min(lower_bound) as lo from queues.history_partitions() where not is_default`,
    );
    const base = Number(rows[0].lo); // the set the test above completed
    // Retention drops the completed set; ids move past the next one, which holds 5 pending tasks.
    const { rows: ran } = await db.query(`select queues.maintain_history_at(now() + interval '8 days') as r`);
    expect(ran[0].r.dropped).toEqual([[base, base + 10]]);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [base + 25]);

    const body = (await app.inject({ method: 'GET', headers: READ, url: '/api/history' })).json();
    expect(body.next_drop).toMatchObject({ lower_bound: base + 10, pending_tasks: 5, drop_after: null });
    expect(body.partitions.find((p: { lower_bound: number }) => p.lower_bound === base + 10)).toMatchObject({
      state: 'next_drop',
      pending_tasks: 5,
    });
    expect(body.oldest_task_id).toBe(base + 10);
    expect(body.recent_drops[0]).toMatchObject({ lower_bound: base, upper_bound: base + 10, tasks: 10 });
    const metrics = (await app.inject({ method: 'GET', headers: READ, url: '/metrics' })).body;
    expect(metrics).toContain('queue_history_next_drop_pending_tasks 5');
    expect(metrics).not.toMatch(/^queue_history_next_drop_timestamp_seconds /m);
    expect(metrics).toContain(
      `queue_history_last_drop_timestamp_seconds ${Date.parse(body.recent_drops[0].dropped_at) / 1000}`,
    );

    // The maintenance schedule fires; its step runs as the worker runs steps; its report shows.
    await db.pool('app').query(`select schedules.enable_schedule('queue_history_maintenance')`);
    const { rows: sup } = await db.query(
      `select t.scheduled_at from queues.task t join schedules.supervisor_task s using (task_id)
        where exists (select 1 from queues.task_pending p where p.task_id = t.task_id)`,
    );
    await db.query(`select schedules.schedule_supervisor_at($1, '{}'::jsonb)`, [sup[0].scheduled_at]);
    const pendingRun = (await app.inject({ method: 'GET', headers: READ, url: '/api/history' })).json().maintenance;
    expect(pendingRun).toMatchObject({ enabled: true, last_run: { outcome: 'enqueued', report: null } });
    const step = pendingRun.last_run.task_id;
    const { rows: leases } = await db.query(
      `select task_id, task_lease_id from queues.claim_tasks_at(now() + interval '1 hour', 'w-history', 100, '{db_function}', 60, 5)
        where task_id = $1`,
      [step],
    );
    await db
      .pool('worker')
      .query(`select * from queues.run_steps($1::bigint[], $2::bigint[], '{queues.maintain_history}', '{"{}"}')`, [
        [step],
        [leases[0].task_lease_id],
      ]);
    const done = (await app.inject({ method: 'GET', headers: READ, url: '/api/history' })).json().maintenance;
    expect(done.last_run).toMatchObject({
      task_id: step,
      task_state: 'succeeded',
      report: { created: expect.any(Array), dropped: [], skipped: [], kept: 1 },
    });
  });

  it('a set that is done is read from its measurement by maintenance; a set still filling is sized on each read', async () => {
    // A fresh set S of 10 ids; one more task above it puts S below the last id.
    const { rows } = await db.query(
      `select max(upper_bound) as top from queues.history_partitions() where not is_default`,
    );
    const base = Number(rows[0].top);
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [base - 1]);
    await db.query('select queues.maintain_history_at(now())');
    const { rows: ids } = await db
      .pool('owner')
      .query('select task_id from queues.enqueue_many($1::jsonb)', [
        JSON.stringify(Array.from({ length: 11 }, () => ({ task_type: 'email', payload: { n: 1 }, max_attempts: 1 }))),
      ]);
    const inS = ids.slice(0, 10).map((r) => Number(r.task_id));
    expect(inS[0]).toBe(base);
    const complete = (taskIds: number[], outcome: string) =>
      db
        .pool('worker')
        .query(`select queues.complete_tasks($1::bigint[], null, array_fill($2::text, array[$3::int]))`, [
          taskIds,
          outcome,
          taskIds.length,
        ]);
    await complete(inS.slice(0, 9), 'succeeded');
    const setS = async () =>
      (await app.inject({ method: 'GET', headers: READ, url: '/api/history' }))
        .json()
        .partitions.find((p: { lower_bound: number }) => p.lower_bound === base);
    const liveBytes = async () =>
      (
        await db.query('select table_bytes, index_bytes from queues.history_partition_sizes() where lower_bound = $1', [
          base,
        ])
      ).rows.map((r) => ({ table_bytes: Number(r.table_bytes), index_bytes: Number(r.index_bytes) }))[0];

    // A pending task: sized and probed on each read, even after a maintenance run.
    await db.query('select queues.maintain_history_at(now())');
    expect(await setS()).toMatchObject({ pending_tasks: 1, measured_at: null, tasks: 10, first_task_id: base });
    // Done, but not measured yet: still read live.
    await complete([inS[9]], 'failed');
    expect(await setS()).toMatchObject({ pending_tasks: 0, measured_at: null, tasks: 10, last_task_id: base + 9 });
    // Maintenance measures it; the reads give what the live sizing gives.
    const { rows: ran } = await db.query(`select queues.maintain_history_step_at(now()) as r`);
    expect(ran[0].r).toMatchObject({ action: 'none', measured: expect.any(Number) });
    expect(ran[0].r.measured).toBeGreaterThanOrEqual(1);
    const measured = await setS();
    expect(measured).toMatchObject({
      state: 'retained',
      pending_tasks: 0,
      tasks: 10,
      first_task_id: base,
      last_task_id: base + 9,
      measured_at: expect.any(String),
      ...(await liveBytes()),
    });
    // Nothing changed: the next run writes nothing.
    const { rows: again } = await db.query(`select queues.maintain_history_step_at(now()) as r`);
    expect(again[0].r).toMatchObject({ action: 'none', measured: 0 });

    // A late fact in S (the failed task redriven: a task_redriven row in S's partition)
    // shows at the next maintenance run, not before.
    await db.pool('api').query('select admin.redrive_task($1)', [inS[9]]);
    const grown = await liveBytes();
    expect(grown.table_bytes).toBeGreaterThan(measured.table_bytes);
    expect(await setS()).toMatchObject({ table_bytes: measured.table_bytes, measured_at: measured.measured_at });
    const { rows: third } = await db.query(`select queues.maintain_history_step_at(now()) as r`);
    expect(third[0].r).toMatchObject({ action: 'none', measured: 1 });
    expect(await setS()).toMatchObject({ ...grown, pending_tasks: 0, tasks: 10, measured_at: expect.any(String) });

    // A dropped set's measurement goes with it.
    await db.query(`select queues.maintain_history_at(now() + interval '8 days')`);
    const { rows: left } = await db.query(
      'select lower_bound from queues.history_set_measured where lower_bound = $1',
      [base],
    );
    expect(left).toEqual([]);
  });
});
