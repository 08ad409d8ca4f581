// queues.interrupt_task: transient errors count, back off, end as a dead letter; fenced;
// rebuilt from the facts. And complete_tasks' _retries: a final failure is not retried.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase, endPendingTasks } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await endPendingTasks(db);
  await db.query('delete from queues.resource_lease');
});

async function enqueue(maxAttempts: number | null = null, resourceKey: string | null = null): Promise<string> {
  const { rows } = await db
    .pool('owner')
    .query(`select queues.enqueue('db_function', '{"db_function": "internal.noop"}', null, null, $1, $2) as id`, [
      resourceKey,
      maxAttempts,
    ]);
  return rows[0].id;
}

async function claimAt(seconds: number, worker = 'w'): Promise<{ task_id: string; task_lease_id: string }[]> {
  const { rows } = await db.query<{ task_id: string; task_lease_id: string }>(
    `select task_id, task_lease_id from queues.claim_tasks_at(now() + make_interval(secs => $1), $2, 10, null, 60, 5)`,
    [seconds, worker],
  );
  return rows;
}

const interrupt = async (taskId: string, leaseId: string, message = 'deadlock detected', max: number | null = 3) =>
  (await db.pool('worker').query('select queues.interrupt_task($1, $2, $3, $4) as r', [taskId, leaseId, message, max]))
    .rows[0].r as string;

describe('interrupt_task', () => {
  it('counts each interruption, backs off, and abandons the task with the last error after the bound', async () => {
    const id = await enqueue();
    const results: string[] = [];
    for (let i = 0; i < 3; i++) {
      // Each retry waits longer: 1 s, then 2 s (backoff_scale 1).
      const [lease] = await claimAt(i * 10);
      expect(lease?.task_id).toBe(id);
      results.push(await interrupt(id, lease.task_lease_id, `deadlock detected (${i + 1})`));
      if (i < 2) {
        const { rows } = await db.query(
          `select round(extract(epoch from retry_at - interrupted_at))::int as wait from queues.task_interruption
            where task_id = $1 order by task_lease_id desc limit 1`,
          [id],
        );
        expect(rows[0].wait).toBe(2 ** i);
      }
    }
    expect(results).toEqual(['retry_scheduled', 'retry_scheduled', 'abandoned']);
    const { rows } = await db.query(
      `select (select outcome from queues.task_end where task_id = $1) as outcome,
              (select array_agg(error_message order by error_id) from queues.error where task_id = $1) as errors`,
      [id],
    );
    expect(rows[0]).toEqual({
      outcome: 'abandoned',
      errors: ['abandoned: 3 transient errors (max 3); the last: deadlock detected (3)'],
    });
  });

  it('does not count as an expired lease (max_leases) and is not claimable before its retry time', async () => {
    const id = await enqueue();
    const [lease] = await claimAt(0);
    expect(await interrupt(id, lease.task_lease_id, 'connection terminated', 5)).toBe('retry_scheduled');
    // The first retry waits 1 s: not claimable at +0.1 s, claimable at +2 s.
    expect(await claimAt(0.1)).toEqual([]);
    const [again] = await claimAt(2);
    expect(again?.task_id).toBe(id);
    const { rows } = await db.query(
      'select released_count, interrupted_count, lease_count from queues.task_pending where task_id = $1',
      [id],
    );
    expect(rows[0]).toEqual({ released_count: 1, interrupted_count: 1, lease_count: 2 });
  });

  it('is fenced: a stale lease gets lease_lost and changes nothing; an unknown task is reported', async () => {
    const id = await enqueue();
    const [stale] = await claimAt(0, 'stale');
    await claimAt(61, 'fresh');
    expect(await interrupt(id, stale.task_lease_id)).toBe('lease_lost');
    expect(await interrupt('999999999', stale.task_lease_id)).toBe('unknown_task');
    expect(
      (await db.query('select count(*)::int as n from queues.task_interruption where task_id = $1', [id])).rows[0].n,
    ).toBe(0);
  });

  it('frees the resource key for the next task', async () => {
    const id = await enqueue(null, 'ik');
    const next = await enqueue(null, 'ik');
    const [lease] = await claimAt(0);
    expect(lease?.task_id).toBe(id);
    expect(await interrupt(id, lease.task_lease_id)).toBe('retry_scheduled');
    expect((await claimAt(0.5)).map((l) => l.task_id)).toEqual([next]);
  });

  it('survives a rebuild of task_pending: the interruption count and retry time come from the facts', async () => {
    const id = await enqueue();
    const [lease] = await claimAt(0);
    await interrupt(id, lease.task_lease_id, 'x', 5);
    const before = (await db.query('select * from queues.task_pending where task_id = $1', [id])).rows[0];
    await db.query('select queues.rebuild_task_pending()');
    const after = (await db.query('select * from queues.task_pending where task_id = $1', [id])).rows[0];
    expect(after).toEqual(before);
  });

  it('refuses bad arguments', async () => {
    const worker = db.pool('worker');
    await expect(worker.query(`select queues.interrupt_task(null, 1, 'x')`)).rejects.toMatchObject({ code: '22004' });
    await expect(worker.query(`select queues.interrupt_task(1, 1, '')`)).rejects.toMatchObject({ code: '22004' });
    await expect(worker.query(`select queues.interrupt_task(1, 1, 'x', 0)`)).rejects.toMatchObject({ code: '22023' });
  });
});

describe('complete_tasks _retries', () => {
  it('a failure marked final completes the task though attempts are left; unmarked, it is retried', async () => {
    const finalId = await enqueue(3);
    const retried = await enqueue(3);
    const leases = await claimAt(0);
    const { rows } = await db
      .pool('worker')
      .query(
        `select task_id, result from queues.complete_tasks($1::bigint[], $2::bigint[], array['failed', 'failed'], array[false, null])`,
        [leases.map((l) => l.task_id), leases.map((l) => l.task_lease_id)],
      );
    expect(Object.fromEntries(rows.map((r) => [r.task_id, r.result]))).toEqual({
      [finalId]: 'completed',
      [retried]: 'retry_scheduled',
    });
  });
});
