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

/** Microseconds since the epoch of a time in the hour before NOW ('11:20:30' is 2030-01-01T11:20:30Z). */
const us = (hms: string | null) => (hms === null ? null : String(Date.parse(`2030-01-01T${hms}Z`) * 1000));
const at = (hms: string) => `2030-01-01T${hms}Z`;

/** Facts written as the owner: tasks, leases of both shapes, completions of both shapes, start marks. */
const facts = {
  async tasks(n: number, enqueuedAt: string): Promise<string[]> {
    const { rows } = await db.query<{ task_id: string }>(
      `insert into queues.task (task_type, payload, enqueued_at, scheduled_at)
       select 'email', jsonb_build_object('n', g), $2::timestamptz, $2::timestamptz from generate_series(1, $1) g
       returning task_id::text`,
      [n, at(enqueuedAt)],
    );
    return rows.map((r) => r.task_id);
  },
  async workerKey(workerId: string): Promise<number> {
    const { rows } = await db.query<{ worker_key: number }>(
      `with added as (insert into queues.worker_name (worker_id) values ($1) on conflict do nothing returning worker_key)
       select worker_key from added union all select worker_key from queues.worker_name where worker_id = $1`,
      [workerId],
    );
    return rows[0].worker_key;
  },
  /** A claim lease of `taskIds` (ascending) by the worker `workerKey`. */
  async claimLease(workerKey: number, leasedAt: string, taskIds: string[]): Promise<string> {
    const { rows } = await db.query<{ task_lease_id: string }>(
      `insert into queues.claim_lease (task_id, worker_key, leased_at, expires_at, task_ids, task_range, task_type)
       values ($4, $1, $2::timestamptz, $2::timestamptz + interval '1 hour', $3::bigint[],
               int8range(($3::bigint[])[1], $4, '[]'), 'email')
       returning task_lease_id::text`,
      [workerKey, at(leasedAt), taskIds, taskIds.at(-1)],
    );
    return rows[0].task_lease_id;
  },
  /** A task lease named by the worker's key, or by its id only (as written before worker keys existed). */
  async taskLease(taskId: string, worker: number | string, leasedAt: string): Promise<string> {
    const { rows } = await db.query<{ task_lease_id: string }>(
      `insert into queues.task_lease (task_id, worker_key, worker_id, leased_at, expires_at)
       values ($1, $2, $3, $4::timestamptz, $4::timestamptz + interval '1 hour') returning task_lease_id::text`,
      [taskId, typeof worker === 'number' ? worker : null, typeof worker === 'string' ? worker : null, at(leasedAt)],
    );
    return rows[0].task_lease_id;
  },
  /** A completion round at `completedAt`: its tasks (ascending), their leases and starts (null: unknown). */
  async round(completedAt: string, taskIds: string[], leaseIds: string[], starts: (string | null)[]): Promise<void> {
    await db.query(
      `insert into queues.completion_round (task_id, completed_at, task_type, task_ids, task_lease_ids, started_us, task_range)
       values ($5, $1::timestamptz, 'email', $2::bigint[], $3::bigint[], $4::bigint[], int8range(($2::bigint[])[1], $5, '[]'))`,
      [at(completedAt), taskIds, leaseIds, starts.map(us), taskIds.at(-1)],
    );
  },
  /** A completion row of its own (outcome, start: null when unknown). */
  async completed(taskId: string, leaseId: string | null, completedAt: string, outcome: string, start: string | null) {
    await db.query(
      `insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type, started_at)
       values ($1, $2, $3::timestamptz, $4, 'email', $5::timestamptz)`,
      [taskId, leaseId, at(completedAt), outcome, start === null ? null : at(start)],
    );
  },
  async startMark(taskId: string, leaseId: string, startedAt: string): Promise<void> {
    await db.query(`insert into queues.task_lease_started (task_id, task_lease_id, started_at) values ($1, $2, $3)`, [
      taskId,
      leaseId,
      at(startedAt),
    ]);
  },
};

describe('busy time, computed by hand', () => {
  afterAll(fixture);

  it('overlapping runs of one end, a run from before the window, unknown starts, rounds with two leases, three workers', async () => {
    await resetQueue();
    const [wa, wb] = [await facts.workerKey('w-a'), await facts.workerKey('w-b')];
    // Tasks of w-a enqueued before the window (their leases are probed one by one), of w-b
    // and w-c within it (their leases read as a range).
    const a = await facts.tasks(8, '10:30:00');
    const b = await facts.tasks(2, '11:20:00');
    const c = await facts.tasks(2, '11:45:00');
    const [cancelled] = await facts.tasks(1, '11:46:00');

    // w-a, 7 runs in 370 s:
    // a task lease from 10:50, no start known: from the window's start, 11:00, to 11:05 (300 s);
    const la6 = await facts.taskLease(a[5], wa, '10:50:00');
    await facts.completed(a[5], la6, '11:05:00', 'succeeded', null);
    // a claim lease from 11:20: a round at 11:20:30 of runs from 11:20:00, :10 and :20, and a
    // round at 11:20:50 of a run from 11:20:25 and one whose start only its start mark
    // knows, 11:19:50: one island from 11:19:50 to 11:20:50 (60 s);
    const l1 = await facts.claimLease(wa, '11:20:00', a.slice(0, 5));
    await facts.round('11:20:30', a.slice(0, 3), [l1, l1, l1], ['11:20:00', '11:20:10', '11:20:20']);
    await facts.round('11:20:50', a.slice(3, 5), [l1, l1], ['11:20:25', null]);
    await facts.startMark(a[4], l1, '11:19:50');
    // a round at 11:50 of two leases: w-a's run from 11:49:50 (10 s), and w-c's below.
    const l3 = await facts.claimLease(wa, '11:49:00', [a[6]]);
    // w-b, 2 runs in 60 s: one claim lease, two failures at 11:30 from 11:29:00 and 11:29:40.
    const lb = await facts.claimLease(wb, '11:28:00', b);
    await facts.completed(b[0], lb, '11:30:00', 'failed', '11:29:00');
    await facts.completed(b[1], lb, '11:30:00', 'failed', '11:29:40');
    // w-c (named by its id), 2 runs in 90 s: from 11:49:00 to 11:50:00, and from 11:48:30 to
    // 11:50:00 in the round of two leases.
    const lc1 = await facts.taskLease(c[0], 'w-c', '11:48:00');
    const lc2 = await facts.taskLease(c[1], 'w-c', '11:48:00');
    await facts.completed(c[0], lc1, '11:50:00', 'succeeded', '11:49:00');
    await facts.round('11:50:00', [a[6], c[1]], [l3, lc2], ['11:49:50', '11:48:30']);
    // Cancelled without a lease: completed, ran nowhere.
    await facts.completed(cancelled, null, '11:30:00', 'cancelled', null);
    await db.query('analyze queues.task, queues.task_lease, queues.claim_lease, queues.task_completed');

    // 11 runs in 370 + 60 + 90 = 520 s of busy time.
    expect(await capacityAt('email')).toMatchObject([
      { completed_in_window: 12, window_workers: 3, tasks_per_worker_hour: 11 / (520 / 3600) },
    ]);

    // A round at 11:40 under a claim lease of w-a from 11:39: a run from 11:39:30 (30 s), and
    // one reported to start at 11:40:05, after its end (the worker's clock ahead of the
    // database's): like every run it counts from its start to its end, −5 s.
    const [a9] = await facts.tasks(1, '11:47:00');
    const l2 = await facts.claimLease(wa, '11:39:00', [a[7], a9]);
    await facts.round('11:40:00', [a[7], a9], [l2, l2], ['11:39:30', '11:40:05']);
    // 13 runs in 520 + 30 − 5 = 545 s.
    expect(await capacityAt('email')).toMatchObject([
      { completed_in_window: 14, window_workers: 3, tasks_per_worker_hour: 13 / (545 / 3600) },
    ]);
  });
});

/** The time `seconds` after `hms` in the hour before NOW, as hh:mm:ss. */
const plus = (hms: string, seconds: number) =>
  new Date(Date.parse(at(hms)) + seconds * 1000).toISOString().slice(11, 19);

describe('busy time of completion rounds', () => {
  afterAll(fixture);

  it('a round of 500 tasks under one lease is one row to sort, not 500, with the same figures', async () => {
    await resetQueue();
    const [wx, wy] = [await facts.workerKey('w-x'), await facts.workerKey('w-y')];
    /** 500 tasks claimed at 11:00 by `worker` and completed in one round at `end`, run i from `first` + i mod `spread` s. */
    const round = async (worker: number, end: string, first: string, spread: number) => {
      const tasks = await facts.tasks(500, '11:00:00');
      const lease = await facts.claimLease(worker, '11:00:00', tasks);
      const starts = tasks.map((_, i) => plus(first, i % spread));
      await facts.round(end, tasks, Array<string>(500).fill(lease), starts);
    };
    await round(wx, '11:10:00', '11:09:00', 60); // 60 s
    await round(wx, '11:30:00', '11:29:30', 30); // 30 s
    await round(wy, '11:10:00', '11:09:30', 30); // 11:09:30 to 11:10:00, and on
    await round(wy, '11:10:20', '11:09:40', 40); // to 11:10:20: one island of 50 s
    await db.query('analyze queues.task, queues.claim_lease, queues.completion_round');

    const root = await db.client('root');
    const plans = await explainNested(root, `select * from admin.capacity_at($1, 'email', 3600, 600)`, [NOW]);
    await root.end();
    const inner = plans.find((p) => p.query.includes('admin.completion_runs_between('));
    expect(inner, 'the capacity statement inside capacity_at was explained').toBeDefined();
    const windows = planNodes(inner!.plan).filter((n) => n['Node Type'] === 'WindowAgg');
    expect(windows.length, 'the islands are found by window functions').toBeGreaterThan(0);
    for (const node of windows) expect(node['Actual Rows'], 'a row per round').toBe(4);
    // 2,000 runs in 60 + 30 + 50 = 140 s of busy time.
    expect(await capacityAt('email')).toMatchObject([
      { completed_in_window: 2000, window_workers: 2, tasks_per_worker_hour: 2000 / (140 / 3600) },
    ]);
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
      const inner = plans.find((p) => p.query.includes('admin.completion_runs_between('));
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
    const inner = plans.find((p) => p.query.includes('admin.completion_runs_between('));
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
