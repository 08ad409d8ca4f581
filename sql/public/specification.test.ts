// The specification's own SQL, run as written: each statement below is copied from
// /work/shared/seeds (role-based-worker-system.md, supervisors.md, queues-and-worker.md)
// and run unqualified, as the database user that would run it, on the queue's facts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** A task type of its own per describe, so the figures are this test's alone. */
async function taskType(name: string): Promise<void> {
  await db.query(`insert into queues.task_type (task_type, description) values ($1, 'specification test')`, [name]);
}

/** `n` tasks of `type` enqueued by the owner (scheduled `inSeconds` from now), one attempt each. */
async function enqueue(type: string, n: number, inSeconds = 0, payload: object = {}): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `select queues.enqueue($1, $2::jsonb, now() + make_interval(secs => $3), null, null, 1) as id from generate_series(1, $4)`,
    [type, JSON.stringify(payload), inSeconds, n],
  );
  return rows.map((r) => r.id);
}

/** Claims up to `n` ready tasks of `type` for `worker` (owner only, lease of `leaseSeconds`). */
async function claim(type: string, worker: string, n: number, leaseSeconds = 3600) {
  const { rows } = await db.query<{ task_id: string; task_lease_id: string }>(
    `select task_id, task_lease_id from queues.claim_tasks_at(now(), $1, $2, array[$3], $4, 5) order by task_id`,
    [worker, n, type, leaseSeconds],
  );
  return rows;
}

describe('role-based-worker-system.md: capacity planning', () => {
  // "Capacity Planning: The `v_worker_capacity` view provides metrics:"
  const STATEMENT = 'SELECT * FROM v_worker_capacity;';

  beforeAll(async () => {
    await taskType('spec_capacity');
    // A worker whose tasks take 100 ms: 10 runs in the last hour, 5 minutes apart, each
    // leased and started at its start and completed 100 ms later.
    await db.query(`
      with t as (
        insert into queues.task (task_type, payload, enqueued_at, scheduled_at)
        select 'spec_capacity', jsonb_build_object('n', g), now() - g * interval '5 minutes', now() - g * interval '5 minutes'
          from generate_series(1, 10) g
        returning task_id, enqueued_at
      ), l as (
        insert into queues.task_lease (task_id, worker_id, leased_at, expires_at)
        select task_id, 'spec-capacity-worker', enqueued_at, enqueued_at + interval '5 minutes' from t
        returning task_id, task_lease_id, leased_at
      ), s as (
        insert into queues.task_lease_started (task_id, task_lease_id, started_at)
        select task_id, task_lease_id, leased_at from l
      )
      insert into queues.task_completed (task_id, task_lease_id, completed_at, outcome, task_type)
      select task_id, task_lease_id, leased_at + interval '100 milliseconds', 'succeeded', 'spec_capacity' from l`);
    await db.query(
      `insert into queues.worker (worker_id, task_types, last_seen_at) values ('spec-capacity-worker', '{spec_capacity}', now())`,
    );
    // Three tasks scheduled hours ahead: nothing to drain before then.
    await enqueue('spec_capacity', 3, 3 * 3600);
  });

  it('answers the api database user with the columns the document lists', async () => {
    const { rows, fields } = await db.pool('api').query(STATEMENT);
    expect(fields.map((f) => f.name)).toEqual(
      expect.arrayContaining([
        'pending_tasks',
        'ready_tasks',
        'running_tasks',
        'active_workers',
        'tasks_per_worker_hour',
        'estimated_hours_to_drain',
      ]),
    );
    expect(rows.map((r) => r.role)).toEqual(expect.arrayContaining(['email', 'product_resync', 'spec_capacity']));
  });

  it('tasks_per_worker_hour is what a busy worker gets through (100 ms tasks: 36,000 an hour), not the arrival rate', async () => {
    const { rows } = await db.pool('api').query(STATEMENT);
    const row = rows.find((r) => r.role === 'spec_capacity');
    expect(row).toMatchObject({
      pending_tasks: '3',
      ready_tasks: '0',
      running_tasks: '0',
      active_workers: '1',
      // Tasks scheduled hours ahead are not a backlog: nothing to drain now.
      estimated_hours_to_drain: 0,
    });
    // 10 runs in 1 s of busy time.
    expect(row.tasks_per_worker_hour).toBeCloseTo(36_000, 6);
  });

  it('the drain estimate counts the ready backlog at that capacity', async () => {
    await enqueue('spec_capacity', 720);
    const { rows } = await db.pool('api').query(STATEMENT);
    const row = rows.find((r) => r.role === 'spec_capacity');
    expect(row).toMatchObject({ pending_tasks: '723', ready_tasks: '720' });
    expect(row.estimated_hours_to_drain).toBeCloseTo(720 / 36_000, 9); // 0.02 h, 72 s
  });
});

describe('role-based-worker-system.md: worker_tasks, health checks and stale recovery', () => {
  // "Monitoring / Health Check"
  const ACTIVE_WORKERS =
    "SELECT worker_id, role, COUNT(*), MAX(last_heartbeat_at) FROM worker_tasks WHERE last_heartbeat_at > NOW() - INTERVAL '5 minutes' GROUP BY worker_id, role;";
  const COUNTS_BY_ROLE_STATUS = 'SELECT role, status, COUNT(*) FROM worker_tasks GROUP BY role, status;';
  const ids: Record<string, string[]> = {};

  beforeAll(async () => {
    await taskType('spec_role');
    // claimed (a live lease, not started) and running (started), by a live worker
    await db.query(`select queues.record_worker_heartbeat('spec-live', '{spec_role}', 30000)`);
    await enqueue('spec_role', 2);
    const claimed = await claim('spec_role', 'spec-live', 2);
    await db.query(`insert into queues.task_lease_started (task_id, task_lease_id) values ($1, $2)`, [
      claimed[1].task_id,
      claimed[1].task_lease_id,
    ]);
    ids.claimed = [claimed[0].task_id];
    ids.running = [claimed[1].task_id];
    // completed and failed, through the specification's worker contract (as the worker)
    const done = await enqueue('spec_role', 2);
    const doneLeases = await claim('spec_role', 'spec-live', 2);
    expect(doneLeases.map((l) => l.task_id)).toEqual(done);
    await db.pool('worker').query('select queues.complete_task($1)', [done[0]]);
    await db.pool('worker').query(`select queues.fail_task($1, 'boom')`, [done[1]]);
    await db.pool('worker').query('select queues.complete_task($1)', [done[1]]);
    ids.completed = [done[0]];
    ids.failed = [done[1]];
    // stale: held by a worker silent for 20 minutes
    const staleTask = await enqueue('spec_role', 1, 0, { store_id: 42, platform: 'dutchie' });
    await claim('spec_role', 'spec-dead', 1);
    await db.query(
      `insert into queues.worker (worker_id, task_types, last_seen_at, heartbeat_interval_ms)
       values ('spec-dead', '{spec_role}', now() - interval '20 minutes', 30000)`,
    );
    ids.stale = staleTask;
    // pending: 2 ready, 1 scheduled later
    ids.pending = [...(await enqueue('spec_role', 2)), ...(await enqueue('spec_role', 1, 3600))];
  });

  it('task counts by role/status: the document statuses, mapped from the facts', async () => {
    const { rows } = await db.pool('api').query(COUNTS_BY_ROLE_STATUS);
    const mine = Object.fromEntries(rows.filter((r) => r.role === 'spec_role').map((r) => [r.status, Number(r.count)]));
    expect(mine).toEqual({ pending: 3, claimed: 1, running: 1, completed: 1, failed: 1, stale: 1 });
  });

  it('each task in the columns of the document’s worker_tasks table', async () => {
    const { rows } = await db.pool('api').query(
      `select id, role, dispensary_id, platform, status, worker_id, claimed_at is not null as claimed,
                started_at is not null as started, completed_at is not null as completed, error_message,
                retry_count, max_retries
           from worker_tasks where role = 'spec_role' order by id`,
    );
    const byId = Object.fromEntries(rows.map((r) => [r.id, r]));
    expect(byId[ids.failed[0]]).toMatchObject({ status: 'failed', error_message: 'boom', completed: true });
    expect(byId[ids.running[0]]).toMatchObject({ status: 'running', worker_id: 'spec-live', started: true });
    expect(byId[ids.claimed[0]]).toMatchObject({ status: 'claimed', worker_id: 'spec-live', started: false });
    expect(byId[ids.stale[0]]).toMatchObject({
      status: 'stale',
      worker_id: 'spec-dead',
      dispensary_id: '42',
      platform: 'dutchie',
      retry_count: 0,
      max_retries: 0,
    });
    // A view over the facts: it cannot be written.
    await expect(db.pool('api').query(`update worker_tasks set status = 'pending'`)).rejects.toMatchObject({
      code: '55000',
      message: 'cannot update view "worker_tasks"',
    });
  });

  it('active workers: the workers holding tasks with a recent heartbeat', async () => {
    const { rows } = await db.pool('api').query(ACTIVE_WORKERS);
    const mine = rows.filter((r) => r.role === 'spec_role').map((r) => ({ worker_id: r.worker_id, count: r.count }));
    // spec-live holds two tasks and completed two within the last 5 minutes; spec-dead
    // has been silent for 20 minutes.
    expect(mine).toEqual([{ worker_id: 'spec-live', count: '4' }]);
  });

  it('recover_stale_tasks(threshold_minutes): the dead worker’s task is pending again', async () => {
    // "-- recover_stale_tasks(threshold_minutes)"
    const { rows } = await db.pool('api').query('SELECT * FROM recover_stale_tasks(10);');
    expect(rows).toEqual([{ task_id: ids.stale[0], task_lease_id: expect.any(String), worker_id: 'spec-dead' }]);
    const { rows: after } = await db.pool('api').query('select status from worker_tasks where id = $1', [ids.stale[0]]);
    expect(after).toEqual([{ status: 'pending' }]);
    // The live worker's tasks are left alone, whatever the threshold.
    expect((await db.pool('api').query('SELECT * FROM recover_stale_tasks(1);')).rows).toEqual([]);
    await expect(db.pool('api').query('SELECT * FROM recover_stale_tasks(0);')).rejects.toMatchObject({
      code: '22023',
      message: 'threshold_minutes must be between 1 and 1440, got 0',
    });
  });
});

describe('role-based-worker-system.md: daily resync generation', () => {
  it('SELECT generate_resync_tasks(6, CURRENT_DATE); as the app and the api database users', async () => {
    await db.query(
      `insert into menus.store (slug, name, menu_url) select 'spec-' || i, 'S' || i, 'u' || i from generate_series(1, 12) i`,
    );
    await db.query(
      `insert into menus.store_platform_id (store_id, platform_dispensary_id) select store_id, 'd-' || store_id from menus.store`,
    );
    await db.query(
      `insert into menus.store_products_discovered (store_id, product_count) select store_id, 1 from menus.store`,
    );
    const { rows } = await db
      .pool('app')
      .query('SELECT generate_resync_tasks(6, CURRENT_DATE); -- 6 batches = every 4 hours');
    expect(rows).toHaveLength(6);
    const { rows: tasks } = await db.query(
      `select count(*)::int as n from queues.task where task_type = 'product_resync'`,
    );
    expect(tasks).toEqual([{ n: 12 }]);
    // Once per date, as the api user too.
    await expect(db.pool('api').query('SELECT generate_resync_tasks(6, CURRENT_DATE);')).rejects.toMatchObject({
      code: '23505',
    });
  });
});

describe('supervisors.md: a supervisor that returns {"error": "missing_task_id"}', () => {
  beforeAll(async () => {
    const worker = db.dbUsers.worker;
    // The document's supervisor, down to its validation (the rest needs its tables).
    await db.query(`
      create schema spec_comms;
      create function spec_comms.send_email_supervisor(
          payload jsonb
      )
      returns jsonb
      language plpgsql
      security definer
      set search_path = pg_catalog, pg_temp
      as $$
      declare
          _task_id bigint := (payload->>'send_email_task_id')::bigint;
      begin
          -- 1. VALIDATION
          if _task_id is null then
              return jsonb_build_object('error', 'missing_task_id');
          end if;
          return jsonb_build_object('status', 'succeeded');
      end;
      $$;
      revoke execute on all functions in schema spec_comms from public;
      grant usage on schema spec_comms to ${worker};
      grant execute on all functions in schema spec_comms to ${worker};
      select internal.register_runnable_function('spec_comms.send_email_supervisor(jsonb)');
    `);
  });

  it('is recorded as its error, not as a malformed envelope', async () => {
    const payload = { task_type: 'db_function', db_function: 'spec_comms.send_email_supervisor' };
    const [taskId] = await enqueue('db_function', 1, 0, payload);
    const [lease] = (await claim('db_function', 'spec-steps', 10)).filter((l) => l.task_id === taskId);
    const { rows } = await db
      .pool('worker')
      .query('select * from queues.run_step($1, $2, $3, $4::jsonb)', [
        taskId,
        lease.task_lease_id,
        payload.db_function,
        JSON.stringify(payload),
      ]);
    expect(rows).toEqual([
      {
        result: 'completed',
        outcome: 'failed',
        error: 'spec_comms.send_email_supervisor: missing_task_id',
        note: null,
      },
    ]);
    const { rows: errors } = await db.query('select error_message from queues.error where task_id = $1', [taskId]);
    expect(errors).toEqual([{ error_message: 'spec_comms.send_email_supervisor: missing_task_id' }]);
  });

  it('parse_envelope: an error or a validation failure alone is well formed; an empty one is not', async () => {
    const parse = async (envelope: object) =>
      (await db.query('select * from queues.parse_envelope($1::jsonb)', [JSON.stringify(envelope)])).rows[0];
    expect(await parse({ error: 'missing_task_id' })).toEqual({ outcome: 'error', message: 'missing_task_id' });
    expect(await parse({ validation_failure_message: 'no such account', payload: {} })).toEqual({
      outcome: 'invalid',
      message: 'no such account',
    });
    expect(await parse({ error: '' })).toMatchObject({ outcome: 'malformed' });
    expect(await parse({ error: 5 })).toMatchObject({ outcome: 'malformed' });
    expect(await parse({ error: 'x', extra: 1 })).toMatchObject({ outcome: 'malformed' });
  });
});

describe('queues-and-worker.md: a validation_failure_message is "non-retriable", a business outcome', () => {
  beforeAll(async () => {
    const worker = db.dbUsers.worker;
    // A kickoff-style step that returns "a human-readable validation_failure_message
    // instead of raising for invalid input".
    await db.query(`
      create schema spec_accounts;
      create function spec_accounts.kickoff_foo(payload jsonb) returns jsonb
        language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
      begin
        return jsonb_build_object('success', false, 'validation_failure_message', 'account 7 not found');
      end $$;
      revoke execute on all functions in schema spec_accounts from public;
      grant usage on schema spec_accounts to ${worker};
      grant execute on all functions in schema spec_accounts to ${worker};
      select internal.register_runnable_function('spec_accounts.kickoff_foo(jsonb)');
    `);
  });

  it('completes validation_failed: final with attempts left, its message kept, not a dead letter', async () => {
    const payload = { task_type: 'db_function', db_function: 'spec_accounts.kickoff_foo' };
    const { rows: enq } = await db.query<{ id: string }>(
      `select queues.enqueue('db_function', $1::jsonb, null, null, null, 3) as id`,
      [JSON.stringify(payload)],
    );
    const taskId = enq[0].id;
    const [lease] = (await claim('db_function', 'spec-steps', 10)).filter((l) => l.task_id === taskId);
    const { rows } = await db
      .pool('worker')
      .query('select * from queues.run_step($1, $2, $3, $4::jsonb)', [
        taskId,
        lease.task_lease_id,
        payload.db_function,
        JSON.stringify(payload),
      ]);
    expect(rows).toEqual([
      {
        result: 'completed',
        outcome: 'validation_failed',
        error: 'spec_accounts.kickoff_foo: validation failure: account 7 not found',
        note: 'account 7 not found',
      },
    ]);
    expect((await db.query('select outcome from queues.task_end where task_id = $1', [taskId])).rows).toEqual([
      { outcome: 'validation_failed' },
    ]);
    expect((await db.query('select 1 from queues.dead_letter where task_id = $1', [taskId])).rows).toEqual([]);
    // Visible: the operations API lists it by its outcome, and worker_tasks shows it failed.
    const { rows: listed } = await db
      .pool('api')
      .query(`select task_id, state from admin.list_tasks(null, 'validation_failed')`);
    expect(listed).toEqual([{ task_id: taskId, state: 'validation_failed' }]);
    expect(
      (await db.pool('api').query('select status, outcome from worker_tasks where id = $1', [taskId])).rows,
    ).toEqual([{ status: 'failed', outcome: 'validation_failed' }]);
  });

  it('a caller may complete a task validation_failed; it is never retried', async () => {
    await taskType('spec_invalid');
    const { rows: enq } = await db.query<{ id: string }>(
      `select queues.enqueue('spec_invalid', '{}', null, null, null, 3) as id`,
    );
    await claim('spec_invalid', 'spec-invalid', 1);
    expect(
      (await db.pool('worker').query(`select queues.complete_task($1, null, 'validation_failed') as done`, [enq[0].id]))
        .rows,
    ).toEqual([{ done: true }]);
    expect(
      (await db.query('select count(*)::int as n from queues.task_pending where task_id = $1', [enq[0].id])).rows,
    ).toEqual([{ n: 0 }]);
  });
});

describe('queues-and-worker.md: record failure, then always complete', () => {
  // "Record failure (if error): call queues.fail_task(task_id, message) for
  // observability. Complete: Always call queues.complete_task(task_id) after
  // processing, whether success or failure."
  beforeAll(async () => {
    await taskType('spec_contract');
  });

  it('queues.fail_task(id, message) then queues.complete_task(id) completes the task failed', async () => {
    const [id] = await enqueue('spec_contract', 1);
    await claim('spec_contract', 'spec-contract', 1);
    await db.pool('worker').query(`select queues.fail_task($1, 'boom')`, [id]);
    expect((await db.pool('worker').query('select queues.complete_task($1) as done', [id])).rows).toEqual([
      { done: true },
    ]);
    const { rows } = await db.query('select outcome from queues.task_end where task_id = $1', [id]);
    expect(rows).toEqual([{ outcome: 'failed' }]);
    // A second complete changes nothing.
    expect((await db.pool('worker').query('select queues.complete_task($1) as done', [id])).rows).toEqual([
      { done: false },
    ]);
    expect((await db.query('select outcome from queues.task_end where task_id = $1', [id])).rows).toEqual([
      { outcome: 'failed' },
    ]);
  });

  it('without a failure the same calls complete it succeeded; a failure of an earlier run does not count', async () => {
    const [ok] = await enqueue('spec_contract', 1);
    await claim('spec_contract', 'spec-contract', 1);
    await db.pool('worker').query('select queues.complete_task($1)', [ok]);
    // Two attempts: the first run fails and is retried, the second succeeds.
    const { rows: twice } = await db.query<{ id: string }>(
      `select queues.enqueue('spec_contract', '{}', null, null, null, 2) as id`,
    );
    const retried = twice[0].id;
    await claim('spec_contract', 'spec-contract', 1);
    await db.pool('worker').query(`select queues.fail_task($1, 'boom')`, [retried]);
    await db.pool('worker').query('select queues.complete_task($1)', [retried]);
    expect(
      (await db.query('select count(*)::int as n from queues.task_attempt_failed where task_id = $1', [retried])).rows,
    ).toEqual([{ n: 1 }]);
    await db.query(
      `select * from queues.claim_tasks_at(now() + interval '2 hours', 'spec-contract', 1, array['spec_contract'], 60, 5)`,
    );
    await db.pool('worker').query('select queues.complete_task($1)', [retried]);
    const { rows } = await db.query(
      'select task_id, outcome from queues.task_end where task_id = any($1::bigint[]) order by task_id',
      [[ok, retried]],
    );
    expect(rows).toEqual([
      { task_id: ok, outcome: 'succeeded' },
      { task_id: retried, outcome: 'succeeded' },
    ]);
  });
});
