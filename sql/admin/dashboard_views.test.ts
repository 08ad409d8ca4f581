// The dashboard's read models: queue depth over a window (from facts, at a given clock),
// workers with heartbeat age and tasks in flight and per-worker stale recovery,
// schedules with their last runs, and process trees with a stuck child.
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
  await db.query('delete from queues.worker');
  await db.query('alter table queues.task disable trigger forbid_update');
  await db.query('truncate queues.task cascade');
  await db.query('alter table queues.task enable trigger forbid_update');
}

const NOW = '2030-01-01T12:00:00Z';

describe('queue depth', () => {
  beforeEach(reset);

  it('pending now, plus completed after, minus enqueued after, per bucket', async () => {
    // 3 email tasks enqueued at 11:10, 11:30, 11:50; the first completed at 11:40.
    const ids: number[] = [];
    for (const at of ['11:10', '11:30', '11:50']) {
      const { rows } = await db.query(
        `insert into queues.task (task_type, payload, enqueued_at, scheduled_at) values ('email', '{}', $1, $1) returning task_id`,
        [`2030-01-01T${at}:00Z`],
      );
      ids.push(Number(rows[0].task_id));
    }
    await db.query('select queues.rebuild_task_pending()');
    await db.query(
      `insert into queues.task_completed (task_id, completed_at, outcome, task_type) values ($1, '2030-01-01T11:40:00Z', 'succeeded', 'email')`,
      [ids[0]],
    );
    await db.query('delete from queues.task_pending where task_id = $1', [ids[0]]);
    const { rows } = await db.query(
      `select to_char(bucket_end at time zone 'UTC', 'HH24:MI') as at, depth::int from admin.queue_depth_at($1, 3600, 600) where task_type = 'email'`,
      [NOW],
    );
    expect(rows).toEqual([
      { at: '11:10', depth: 1 },
      { at: '11:20', depth: 1 },
      { at: '11:30', depth: 2 },
      { at: '11:40', depth: 1 },
      { at: '11:50', depth: 2 },
      { at: '12:00', depth: 2 },
    ]);
    const sms = await db.query(
      `select count(*)::int as buckets, max(depth)::int as max from admin.queue_depth_at($1, 3600, 600) where task_type = 'sms'`,
      [NOW],
    );
    expect(sms.rows[0]).toEqual({ buckets: 6, max: 0 });
  });

  it('refuses a bad window or bucket (22023)', async () => {
    await expect(db.pool('api').query('select * from admin.queue_depth(10, null)')).rejects.toMatchObject({
      code: '22023',
    });
    await expect(db.pool('api').query('select * from admin.queue_depth(3600, 5)')).rejects.toMatchObject({
      code: '22023',
    });
    await expect(db.pool('api').query('select * from admin.queue_depth(86400, 60)')).rejects.toMatchObject({
      code: '22023',
      message: expect.stringContaining('500 buckets'),
    });
  });
});

describe('workers', () => {
  beforeEach(reset);

  it('lists live, stale and stopped workers with heartbeat age and tasks in flight; recovers one stale worker', async () => {
    const w = db.pool('worker');
    for (const id of ['live', 'stale', 'gone'])
      await w.query(`select queues.record_worker_heartbeat($1, '{email}')`, [id]);
    // email is worker-only (queues.assert_may_enqueue): enqueued as the owner's SQL does.
    await db.query(`select queues.enqueue_internal('email', '{}'::jsonb) from generate_series(1, 3)`);
    await w.query(`select * from queues.claim_tasks('live', 1, '{email}', 600)`);
    await w.query(`select * from queues.claim_tasks('stale', 2, '{email}', 3600)`);
    await w.query(`select queues.record_worker_stopped('gone')`);
    await db.query(`update queues.worker set last_seen_at = now() - interval '20 minutes' where worker_id = 'stale'`);
    const { rows } = await db
      .pool('api')
      .query(
        'select worker_id, status, tasks_in_flight::int, heartbeat_age_seconds > 1000 as old from admin.list_workers()',
      );
    expect(rows).toEqual([
      { worker_id: 'live', status: 'live', tasks_in_flight: 1, old: false },
      { worker_id: 'stale', status: 'stale', tasks_in_flight: 2, old: true },
      { worker_id: 'gone', status: 'stopped', tasks_in_flight: 0, old: false },
    ]);
    await expect(db.pool('api').query(`select * from admin.recover_worker_leases('live')`)).rejects.toMatchObject({
      code: '55000',
      message: expect.stringContaining('not stale'),
    });
    await expect(db.pool('api').query(`select * from admin.recover_worker_leases('gone')`)).rejects.toMatchObject({
      code: '55000',
    });
    await expect(db.pool('api').query(`select * from admin.recover_worker_leases('nobody')`)).rejects.toMatchObject({
      code: '23503',
    });
    await expect(db.pool('api').query(`select * from admin.recover_worker_leases('stale', 5)`)).rejects.toMatchObject({
      code: '22023',
    });
    const recovered = await db.pool('api').query(`select * from admin.recover_worker_leases('stale')`);
    expect(recovered.rows).toHaveLength(2);
    expect(recovered.rows.every((r) => r.worker_id === 'stale')).toBe(true);
    // The live worker's lease is untouched; the two tasks are ready again.
    const ready = await db.pool('api').query(`select count(*)::int as n from admin.list_tasks('email', 'ready')`);
    expect(ready.rows[0].n).toBe(2);
    expect(
      (await db.pool('api').query(`select count(*)::int as n from admin.list_tasks('email', 'running')`)).rows[0].n,
    ).toBe(1);
  });
});

describe('schedules', () => {
  beforeEach(reset);

  it('each schedule with its last runs and how their tasks ended', async () => {
    await db.query(
      `select * from schedules.upsert_schedule_at($1::timestamptz - interval '2 hours', 'reports.hourly', '0 * * * *', 'analytics_refresh', '{}'::jsonb, 0, 'skip')`,
      [NOW],
    );
    const { rows: s } = await db.query(`select schedule_id from schedules.schedule where name = 'reports.hourly'`);
    for (const at of ['10:00:30', '11:00:30', '12:00:30'])
      await db.query(`select schedules.run_schedule_at($1, $2)`, [`2030-01-01T${at}Z`, s[0].schedule_id]);
    const first = await db.query(`select task_id from schedules.schedule_run order by fire_at limit 1`);
    await db.query(
      `insert into queues.task_completed (task_id, outcome, task_type) select task_id, 'failed', task_type from queues.task where task_id = $1`,
      [first.rows[0].task_id],
    );
    // The role-based system's schedules (menus.*, installed disabled) are listed beside it.
    const all = (await db.query(`select name, enabled, last_runs from admin.list_schedules_at($1, 2)`, [NOW])).rows;
    const rows = all.filter((r) => r.name === 'reports.hourly');
    expect(rows, JSON.stringify(all.map((r) => r.name as string))).toHaveLength(1);
    // Fire times after the schedule's creation (10:00): 11:00 and 12:00; the 11:00 task failed.
    expect(
      rows[0].last_runs.map((r: { fire_at: string; task_state: string; outcome: string }) => [
        r.fire_at.slice(11, 16),
        r.outcome,
        r.task_state,
      ]),
    ).toEqual([
      ['12:00', 'enqueued', 'ready'],
      ['11:00', 'enqueued', 'failed'],
    ]);
    const one = await db.query(`select name, last_runs from admin.list_schedules_at($1, 1)`, [NOW]);
    expect(one.rows.find((r) => r.name === 'reports.hourly')?.last_runs).toHaveLength(1);
    await expect(db.pool('api').query('select * from admin.list_schedules(21)')).rejects.toMatchObject({
      code: '22023',
    });
  });
});

describe('process tree', () => {
  it('an account deletion with one file deletion stuck (three failed attempts) and one running', async () => {
    const { rows: acc } = await db.query(
      `insert into accounts.account (email) values ('tree@example.com') returning account_id`,
    );
    const accountId = acc[0].account_id;
    for (const n of [1, 2])
      await db.query(`insert into files.file (account_id, bucket, object_key) values ($1, 'bucket-one', $2)`, [
        accountId,
        `k${n}`,
      ]);
    await db.pool('app').query('select * from api.request_account_deletion($1)', [accountId]);
    const { rows: root } = await db.query(
      'select account_deletion_task_id as id from accounts.account_deletion_task where account_id = $1',
      [accountId],
    );
    await db.query(
      `select internal.run_function('accounts.account_deletion_supervisor', jsonb_build_object('account_deletion_task_id', $1::bigint))`,
      [root[0].id],
    );
    const { rows: fds } = await db.query(
      'select fd.file_deletion_task_id as id from files.file_deletion_task fd join files.file f using (file_id) where f.account_id = $1 order by 1',
      [accountId],
    );
    expect(fds).toHaveLength(2);
    for (let i = 0; i < 3; i++) {
      const { rows: a } = await db.query(
        'insert into files.file_deletion_attempt (file_deletion_task_id) values ($1) returning file_deletion_attempt_id as id',
        [fds[0].id],
      );
      await db.query(
        `insert into files.file_deletion_attempt_failed (file_deletion_attempt_id, error_message) values ($1, 'denied')`,
        [a[0].id],
      );
    }
    const { rows } = await db
      .pool('api')
      .query('select admin.process_tree($1, $2) as tree', ['account_deletion', root[0].id]);
    const tree = rows[0].tree;
    expect(tree).toMatchObject({ process: 'account_deletion', status: 'running', stuck_descendants: 1 });
    expect(
      tree.children.map((c: { process: string; status: string; attempts: number; failed_attempts: number }) => [
        c.process,
        c.status,
        c.attempts,
        c.failed_attempts,
      ]),
    ).toEqual([
      ['file_deletion', 'stuck', 3, 3],
      ['file_deletion', 'running', 0, 0],
    ]);
    // Listed first, as stuck, among the account deletions.
    const { rows: roots } = await db
      .pool('api')
      .query(`select root_id::int, status, stuck_descendants from admin.list_process_roots_ranked('account_deletion')`);
    expect(roots[0]).toEqual({ root_id: Number(root[0].id), status: 'stuck', stuck_descendants: 1 });
    // Nothing recorded for longer than the threshold also counts as stuck.
    const later = await db.query(
      `select admin.process_tree_at(now() + interval '1 hour', 'file_deletion', $1, 600) ->> 'status' as status`,
      [fds[1].id],
    );
    expect(later.rows[0].status).toBe('stuck');
    await expect(db.pool('api').query(`select admin.process_tree('account_deletion', 999999)`)).rejects.toMatchObject({
      code: '23503',
    });
    await expect(db.pool('api').query(`select admin.process_tree('nope', 1)`)).rejects.toMatchObject({ code: '22023' });
  });
});
