// queues.run_task_now: a task no worker has taken is made due now, with its fact; the
// task is claimed only after the run-now transaction commits; a taken, completed or
// unknown task is left alone and named so; only the owner's SQL may call it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const enqueue = async (inSeconds: number): Promise<string> =>
  (
    await db.query<{ id: string }>(
      `select queues.enqueue_internal('db_function', '{"db_function": "internal.noop"}', now() + make_interval(secs => $1))::text as id`,
      [inSeconds],
    )
  ).rows[0].id;
const runNow = async (taskId: string): Promise<string> =>
  (await db.query<{ state: string }>('select queues.run_task_now($1) as state', [taskId])).rows[0].state;
const claimNow = async (): Promise<{ task_id: string; task_lease_id: string }[]> =>
  (
    await db.query<{ task_id: string; task_lease_id: string }>(
      `select task_id::text, task_lease_id::text
         from queues.claim_tasks_at(_now => now(), _worker_id => 'w1', _limit => 100, _task_types => null::text[], _lease_seconds => 60, _max_leases => 100)`,
    )
  ).rows;
const runNowFacts = async (taskId: string) =>
  (await db.query('select requested_at from queues.task_run_now where task_id = $1', [taskId])).rows;

describe('queues.run_task_now', () => {
  it('makes a scheduled task due now and records the request', async () => {
    const id = await enqueue(3600);
    expect(await claimNow()).toEqual([]);
    expect(await runNow(id)).toBe('due_now');
    expect(await runNowFacts(id)).toHaveLength(1);
    const claimed = await claimNow();
    expect(claimed.map((t) => t.task_id)).toEqual([id]);
    await db.query('select queues.complete_task($1, $2, $3)', [id, claimed[0].task_lease_id, 'succeeded']);
  });

  it('a task already due stays as it is and counts as woken', async () => {
    const id = await enqueue(0);
    expect(await runNow(id)).toBe('due_now');
    expect(await runNowFacts(id)).toEqual([]);
    const claimed = await claimNow();
    expect(claimed.map((t) => t.task_id)).toEqual([id]);
    await db.query('select queues.complete_task($1, $2, $3)', [id, claimed[0].task_lease_id, 'succeeded']);
  });

  it('the task is claimed only after the run-now transaction commits', async () => {
    const id = await enqueue(3600);
    const tx = await db.client('owner');
    try {
      await tx.query('begin');
      expect((await tx.query('select queues.run_task_now($1) as state', [id])).rows[0].state).toBe('due_now');
      // Due now inside the transaction, yet a claim beside it skips the locked row.
      expect(await claimNow()).toEqual([]);
      await tx.query('commit');
    } finally {
      await tx.end();
    }
    const claimed = await claimNow();
    expect(claimed.map((t) => t.task_id)).toEqual([id]);
    await db.query('select queues.complete_task($1, $2, $3)', [id, claimed[0].task_lease_id, 'succeeded']);
  });

  it('leaves a taken, a completed and an unknown task alone', async () => {
    const id = await enqueue(0);
    const [claimed] = await claimNow();
    expect(await runNow(id)).toBe('taken');
    await db.query('select queues.complete_task($1, $2, $3)', [id, claimed.task_lease_id, 'succeeded']);
    expect(await runNow(id)).toBe('not_pending');
    expect(await runNow('999999999')).toBe('not_pending');
    expect(await runNowFacts(id)).toEqual([]);
  });

  it('refuses a null task id with a clear error', async () => {
    await expect(db.query('select queues.run_task_now(null)')).rejects.toMatchObject({
      code: '22004',
      message: 'task_id must not be null',
    });
  });

  it('waits for a claim that holds the row, then finds the task taken', async () => {
    const id = await enqueue(0);
    const claimer = await db.client('owner');
    try {
      await claimer.query('begin');
      await claimer.query(
        `select * from queues.claim_tasks_at(_now => now(), _worker_id => 'w2', _limit => 1, _task_types => null::text[], _lease_seconds => 60, _max_leases => 100)`,
      );
      const madeDue = db.query<{ state: string }>('select queues.run_task_now($1) as state', [id]);
      // The run-now statement waits on the claim's row lock until the claim commits.
      for (;;) {
        const { rows } = await db.query<{ waiting: boolean }>(
          `select exists (select 1 from pg_stat_activity
                           where datname = current_database() and wait_event_type = 'Lock'
                            and query like '%run_task_now%') as waiting`,
        );
        if (rows[0].waiting) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      await claimer.query('commit');
      expect((await madeDue).rows[0].state).toBe('taken');
    } finally {
      await claimer.end();
    }
    expect(await runNowFacts(id)).toEqual([]);
  });

  it('neither the worker, the app nor the API may call it', async () => {
    const id = await enqueue(3600);
    for (const role of ['worker', 'app', 'api'] as const) {
      await expect(db.pool(role).query('select queues.run_task_now($1)', [id])).rejects.toThrow(/permission denied/);
    }
    expect(await runNowFacts(id)).toEqual([]);
  });
});
