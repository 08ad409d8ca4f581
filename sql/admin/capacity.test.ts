// Capacity per role against a fixture with known numbers (time moved by passing the
// clock to the owner-only capacity_at), and its independence from history.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestDatabase,
  explainNested,
  planNodes,
  sharedBuffers,
  type PlanNode,
  type TestDatabase,
} from '@org/testing';

/** The table a plan node reads; a history partition counts as its parent (task_p0 is task). */
const relationOf = (n: PlanNode): string => (n['Relation Name'] ?? '').replace(/_(p\d+|default)$/, '');

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const NOW = '2030-01-01T12:00:00Z';

async function resetQueue(): Promise<void> {
  await db.query('delete from queues.worker');
  await db.query('alter table queues.task disable trigger forbid_update');
  await db.query('truncate queues.task cascade');
  await db.query('alter table queues.task enable trigger forbid_update');
}

/** `n` email tasks enqueued a minute before `at`, leased by `worker` and completed at `at`. */
const completed = async (n: number, worker: string, at: string) => {
  await db.query(
    `with t as (
       insert into queues.task (task_type, payload, enqueued_at, scheduled_at)
       select 'email', jsonb_build_object('n', g), $2::timestamptz - interval '1 minute', $2::timestamptz - interval '1 minute'
         from generate_series(1, $1) g returning task_id
     ), l as (
       insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
       select task_id, $3, $2::timestamptz - interval '10 seconds', $2::timestamptz + interval '5 minutes' from t
       returning task_id, task_lease_id
     )
     insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
     select task_id, task_lease_id, $2::timestamptz, 'succeeded', 'email' from l`,
    [n, at, worker],
  );
};

/**
 * The fixture, written as facts by the owner at explicit times around NOW:
 *   email: 10 completions 30 min before NOW (6 by w-a, 4 by w-b), 5 completions 2 h before
 *          (outside the 1 h window); 12 pending: 8 ready, 2 running, 2 scheduled later.
 *   workers: w-a {email} seen 1 min ago, w-b {email,sms} 2 min ago, w-dead {email} 20 min
 *          ago, w-stopped {email} stopped.
 */
async function fixture(): Promise<void> {
  await resetQueue();
  await completed(6, 'w-a', '2030-01-01T11:30:00Z');
  await completed(4, 'w-b', '2030-01-01T11:30:00Z');
  await completed(5, 'w-a', '2030-01-01T10:00:00Z');

  const pending = async (n: number, available: string, leased: boolean) => {
    await db.query(
      `with t as (
         insert into queues.task (task_type, payload, enqueued_at, scheduled_at)
         select 'email', '{}', $2::timestamptz - interval '1 hour', least($2::timestamptz, $4::timestamptz)
           from generate_series(1, $1) g returning *
       ), l as (
         insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
         select task_id, 'w-a', $4::timestamptz - interval '1 minute', $2::timestamptz from t where $3
         returning task_id, task_lease_id
       )
       insert into queues.task_pending (task_id, task_type, priority, scheduled_at, resource_key, available_at,
                                        current_lease_id, lease_count)
       select t.task_id, t.task_type, t.priority, t.scheduled_at, t.resource_key, $2::timestamptz,
              l.task_lease_id, case when l.task_lease_id is null then 0 else 1 end
         from t left join l on l.task_id = t.task_id`,
      [n, available, leased, NOW],
    );
  };
  await pending(8, '2030-01-01T11:59:00Z', false);
  await pending(2, '2030-01-01T12:05:00Z', true);
  await pending(2, '2030-01-01T13:00:00Z', false);

  await db.query(
    `insert into queues.worker (worker_id, task_types, started_at, last_seen_at, stopped_at) values
       ('w-a', '{email}', '2030-01-01T08:00:00Z', '2030-01-01T11:59:00Z', null),
       ('w-b', '{email,sms}', '2030-01-01T08:00:00Z', '2030-01-01T11:58:00Z', null),
       ('w-dead', '{email}', '2030-01-01T08:00:00Z', '2030-01-01T11:40:00Z', null),
       ('w-stopped', '{email}', '2030-01-01T08:00:00Z', '2030-01-01T11:59:00Z', '2030-01-01T11:59:00Z')`,
  );
}

const capacityAt = async (taskType: string | null) =>
  (
    await db.query(
      `select task_type, pending::int, ready::int, running::int, active_workers::int, completed_in_window::int,
              window_workers::int, window_seconds, tasks_per_worker_hour, estimated_hours_to_drain,
              workers_needed_1h::int, workers_needed_4h::int, workers_needed_8h::int
         from admin.capacity_at($1, $2, 3600, 600)`,
      [NOW, taskType],
    )
  ).rows;

describe('capacity', () => {
  beforeAll(fixture);

  it('per role: pending, ready, running, workers, throughput, time to drain, workers needed', async () => {
    expect(await capacityAt('email')).toEqual([
      {
        task_type: 'email',
        pending: 12,
        ready: 8,
        running: 2,
        active_workers: 2, // w-a and w-b; w-dead is silent for 20 min, w-stopped stopped
        completed_in_window: 10, // the 5 from two hours ago are outside the window
        window_workers: 2,
        window_seconds: 3600,
        // 10 tasks in 20 s of busy time (each worker's runs overlap: leased 10 s before
        // completion, side by side): 10 / (20 / 3600)
        tasks_per_worker_hour: 1800,
        estimated_hours_to_drain: 8 / 3600, // 8 ready / (1800 × 2 active workers)
        workers_needed_1h: 1, // ceil(12 / 1800)
        workers_needed_4h: 1,
        workers_needed_8h: 1,
      },
    ]);
  });

  it('all roles: every registered type appears; nothing pending means zero hours and zero workers', async () => {
    const all = await capacityAt(null);
    expect(all.map((r) => r.task_type)).toEqual(expect.arrayContaining(['db_function', 'email', 'file_delete', 'sms']));
    expect(all.find((r) => r.task_type === 'sms')).toMatchObject({
      pending: 0,
      active_workers: 1,
      tasks_per_worker_hour: null,
      estimated_hours_to_drain: 0,
      workers_needed_1h: 0,
    });
  });

  it('busy time is the union of a worker’s runs: side by side counts once, waiting counts not', async () => {
    await resetQueue();
    // w-a: 4 runs of 10 s side by side (one island of 10 s), then 2 runs of 10 s 20 min
    // apart (two islands): 6 runs in 30 s of busy time.
    await completed(4, 'w-a', '2030-01-01T11:30:00Z');
    await completed(1, 'w-a', '2030-01-01T11:40:00Z');
    await completed(1, 'w-a', '2030-01-01T11:55:00Z');
    try {
      expect(await capacityAt('email')).toMatchObject([
        { completed_in_window: 6, window_workers: 1, tasks_per_worker_hour: 6 / (30 / 3600) },
      ]);
      // A start mark moves the run's start from its lease to it: the first run of 11:40
      // started 8 s after its lease, so busy time is 10 + 2 + 10 = 22 s.
      await db.query(
        `insert into queues.task_lease_started (task_id, task_lease_id, started_at)
         select c.task_id, c.task_lease_id, c.completed_at - interval '2 seconds'
           from queues.task_end c where c.completed_at = '2030-01-01T11:40:00Z'`,
      );
      const [row] = await capacityAt('email');
      expect(row.tasks_per_worker_hour).toBeCloseTo(6 / (22 / 3600), 9);
    } finally {
      await fixture();
    }
  });

  it('a completion without a lease (cancelled) counts as completed, not as a worker', async () => {
    const { rows } = await db.query(
      `with t as (
         insert into queues.task (task_type, payload, enqueued_at, scheduled_at)
         values ('email', '{}', $1::timestamptz - interval '20 minutes', $1::timestamptz - interval '20 minutes')
         returning task_id, task_type
       )
       insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
       select task_id, null, $1::timestamptz - interval '10 minutes', 'cancelled', task_type from t
       returning task_id`,
      [NOW],
    );
    try {
      expect(await capacityAt('email')).toMatchObject([
        // It ran nowhere: the rate is the same.
        { completed_in_window: 11, window_workers: 2, tasks_per_worker_hour: 1800 },
      ]);
    } finally {
      await db.query('delete from queues.task_completed where task_id = $1', [rows[0].task_id]);
      await db.query('delete from queues.task where task_id = $1', [rows[0].task_id]);
    }
  });

  it('moving the clock moves the window: an hour later the throughput is unknown', async () => {
    const { rows } = await db.query(
      `select completed_in_window::int, tasks_per_worker_hour, workers_needed_1h, active_workers::int
         from admin.capacity_at($1::timestamptz + interval '1 hour', 'email', 3600, 600)`,
      [NOW],
    );
    expect(rows).toEqual([
      { completed_in_window: 0, tasks_per_worker_hour: null, workers_needed_1h: null, active_workers: 0 },
    ]);
  });

  it('refuses bad input with the field named', async () => {
    await expect(db.query(`select * from admin.capacity_at($1, 'nope', 3600, 600)`, [NOW])).rejects.toMatchObject({
      code: '23503',
      message: "unknown task_type 'nope'",
    });
    await expect(db.query(`select * from admin.capacity_at($1, null, 10, 600)`, [NOW])).rejects.toMatchObject({
      code: '22023',
      message: expect.stringMatching(/^window_seconds must be between 60/),
    });
    await expect(db.query(`select * from admin.capacity_at(null, null, 3600, 600)`)).rejects.toMatchObject({
      code: '22004',
    });
  });

  it('the API role may call capacity() but not the clock-taking capacity_at()', async () => {
    const { rows } = await db.pool('api').query(`select * from admin.capacity('email')`);
    expect(rows).toHaveLength(1);
    await expect(db.pool('api').query(`select * from admin.capacity_at(now(), null, 3600, 600)`)).rejects.toMatchObject(
      {
        code: '42501',
      },
    );
  });
});

/** 50,000 tasks (email and sms) enqueued, leased and completed a day before NOW, as facts. */
async function history(): Promise<void> {
  await db.query(`
    with t as (
      insert into queues.task (task_type, payload, enqueued_at, scheduled_at)
      select case when g % 2 = 0 then 'email' else 'sms' end, jsonb_build_object('n', g),
             '2029-12-31T00:00:00Z', '2029-12-31T00:00:00Z'
        from generate_series(1, 50000) g
      returning task_id, task_type
    ), l as (
      insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
      select task_id, 'old', '2029-12-31T00:00:00Z', '2029-12-31T00:05:00Z' from t
      returning task_id, task_lease_id
    )
    insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
    select l.task_id, l.task_lease_id, '2029-12-31T00:01:00Z', 'succeeded', t.task_type from l join t using (task_id)`);
}

describe('history', () => {
  it('with 50,000 completed history rows, capacity reads only the window and about the same buffers', async () => {
    await fixture();
    const root = await db.client('root');
    const measure = async () => {
      await db.query('analyze queues.task, queues.task_lease, queues.task_completed, queues.task_pending');
      const plans = await explainNested(root, `select * from admin.capacity_at($1, null, 3600, 600)`, [NOW]);
      const inner = plans.find((p) => p.query.includes('admin.completions_between('));
      expect(inner, 'the capacity statement inside capacity_at was explained').toBeDefined();
      return inner!;
    };
    const before = await measure();

    await history();
    const after = await measure();

    const nodes = planNodes(after.plan);
    // History is never scanned: the facts are reached by the completion-time index
    // (the window's rows) and by primary key.
    const seqScans = nodes.filter(
      (n) =>
        n['Node Type'] === 'Seq Scan' &&
        ['task', 'task_lease', 'task_completed'].includes(relationOf(n)) &&
        // An empty partition (the default one, a set made ahead) costs nothing to scan.
        sharedBuffers(n) > 0,
    );
    expect(seqScans).toEqual([]);
    // (Partitions that hold nothing, read at no cost, aside.)
    const completedScans = nodes.filter((n) => relationOf(n) === 'task_completed' && sharedBuffers(n) > 0);
    expect(completedScans.length).toBeGreaterThan(0);
    for (const node of completedScans) {
      expect(node['Node Type'], 'task_completed is read by index').toMatch(/Index/);
      expect(node['Actual Rows'], 'only the window’s completions').toBeLessThanOrEqual(10);
    }
    for (const node of nodes) {
      if (['task', 'task_lease'].includes(relationOf(node))) {
        expect(node['Actual Rows'], `${node['Node Type']} on ${node['Relation Name']}`).toBeLessThanOrEqual(10);
      }
    }
    const answer = await capacityAt('email');
    expect(answer[0]).toMatchObject({ completed_in_window: 10, tasks_per_worker_hour: 1800 });
    // Cost follows the window: the completion-time range is a few index pages, and each of
    // the 10 completions costs two primary-key probes (task, task_lease) of at most 4
    // pages once 50,000 rows have deepened those indexes. A scan of history would read
    // hundreds of pages.
    for (const node of completedScans) expect(sharedBuffers(node)).toBeLessThanOrEqual(5);
    expect(sharedBuffers(after.plan)).toBeLessThanOrEqual(sharedBuffers(before.plan) + 10 * 2 * 4);
    await root.end();
  });

  it('with history enqueued before the window (lower ids, the same partitions), it reads the leases of the window only', async () => {
    await resetQueue();
    await history();
    await completed(6, 'w-a', '2030-01-01T11:30:00Z');
    await completed(4, 'w-b', '2030-01-01T11:30:00Z');
    await db.query('analyze queues.task, queues.task_lease, queues.task_completed, queues.task_pending');
    const root = await db.client('root');
    const plans = await explainNested(root, `select * from admin.capacity_at($1, 'email', 3600, 600)`, [NOW]);
    await root.end();
    const inner = plans.find((p) => p.query.includes('admin.completions_between('));
    expect(inner, 'the capacity statement inside capacity_at was explained').toBeDefined();
    const nodes = planNodes(inner!.plan);
    const historyReads = nodes.filter(
      (n) =>
        ['task', 'task_lease', 'task_completed'].includes(relationOf(n)) &&
        n['Node Type'] !== 'ModifyTable' &&
        Number(n['Actual Rows'] ?? 0) > 10,
    );
    expect(historyReads.map((n) => `${n['Node Type']} on ${n['Relation Name']}`)).toEqual([]);
    const leaseReads = nodes.filter((n) => relationOf(n) === 'task_lease');
    expect(leaseReads.length, 'the leases are read').toBeGreaterThan(0);
    const answer = await capacityAt('email');
    expect(answer[0]).toMatchObject({ completed_in_window: 10, window_workers: 2 });
  });
});
