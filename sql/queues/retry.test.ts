// Simple retries with exponential backoff, dead letters and redrive.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase, endPendingTasks } from '@org/testing';
import { claimDue, processTask } from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

async function enqueue(payload: Record<string, unknown>, maxAttempts = 1, type = 'db_function'): Promise<string> {
  const { rows } = await db
    .pool('owner')
    .query(`select queues.enqueue($1, $2::jsonb, null, null, null, $3) as id`, [
      type,
      JSON.stringify(payload),
      maxAttempts,
    ]);
  return rows[0].id;
}

async function claimAt(seconds: number, taskId: string) {
  const { rows } = await db.query(
    `select task_id, task_lease_id
       from queues.claim_tasks_at(now() + make_interval(secs => $1), 'w', 100, null, 60, 5) where task_id = $2`,
    [seconds, taskId],
  );
  return rows[0] as { task_id: string; task_lease_id: string } | undefined;
}

const failRun = async (lease: { task_id: string; task_lease_id: string }) =>
  (
    await db
      .pool('worker')
      .query(`select result from queues.complete_tasks($1::bigint[], $2::bigint[], array['failed'])`, [
        [lease.task_id],
        [lease.task_lease_id],
      ])
  ).rows[0].result as string;

describe('simple retries', () => {
  it('a failed attempt with attempts left runs again after an exponential backoff, then dead-letters', async () => {
    const id = await enqueue({ db_function: 'internal.noop' }, 3);
    // Retry times count from the failure (the server's clock); claims move the clock past them.
    let clock = 0;
    const waits: number[] = [];
    for (let attempt = 1; attempt <= 3; attempt++) {
      const lease = await claimAt(clock, id);
      expect(lease, `attempt ${attempt} claimable at +${clock}s`).toBeDefined();
      expect(await failRun(lease!)).toBe(attempt < 3 ? 'retry_scheduled' : 'completed');
      if (attempt < 3) {
        const { rows } = await db.query(
          `select extract(epoch from retry_at - failed_at)::int as wait from queues.task_attempt_failed where task_id = $1 order by 1 desc limit 1`,
          [id],
        );
        waits.push(rows[0].wait);
        // Not before the backoff ...
        expect(await claimAt(rows[0].wait - 2, id)).toBeUndefined();
        clock = rows[0].wait + 1;
      }
    }
    expect(waits).toEqual([5, 10]);
    const { rows } = await db.query('select outcome from queues.task_end where task_id = $1', [id]);
    expect(rows).toEqual([{ outcome: 'failed' }]);
    const dead = await db.query('select task_id, outcome, attempts from queues.dead_letter where task_id = $1', [id]);
    expect(dead.rows).toEqual([{ task_id: id, outcome: 'failed', attempts: 3 }]);
  });

  it('a task with one attempt completes failed at once; success ends retries', async () => {
    const once = await enqueue({ n: 1 }, 1);
    expect(await failRun((await claimAt(0, once))!)).toBe('completed');
    const twice = await enqueue({ n: 2 }, 2);
    expect(await failRun((await claimAt(0, twice))!)).toBe('retry_scheduled');
    const second = (await claimAt(20, twice))!;
    const { rows } = await db
      .pool('worker')
      .query(`select result from queues.complete_tasks($1::bigint[], $2::bigint[])`, [[twice], [second.task_lease_id]]);
    expect(rows[0].result).toBe('completed');
    expect((await db.query('select outcome from queues.task_end where task_id = $1', [twice])).rows[0].outcome).toBe(
      'succeeded',
    );
  });

  it('the rebuilt claim index keeps attempts and retry times', async () => {
    const id = await enqueue({ n: 3 }, 4);
    await failRun((await claimAt(0, id))!);
    const snapshot = async () =>
      (
        await db.query(
          'select task_id, available_at, current_lease_id, failed_attempts, max_attempts from queues.task_pending where task_id = $1',
          [id],
        )
      ).rows;
    const before = await snapshot();
    expect(before[0]).toMatchObject({ failed_attempts: 1, max_attempts: 4, current_lease_id: null });
    await db.query('select queues.rebuild_task_pending()');
    expect(await snapshot()).toEqual(before);
  });
});

describe('the default attempts', () => {
  it('a task enqueued without max_attempts gets queues.default_max_attempts() (25) and is retried after a failure', async () => {
    const { rows } = await db.pool('app').query(`select queues.enqueue('product_resync', '{"n": 25}') as id`);
    const id = rows[0].id as string;
    const { rows: task } = await db.query('select max_attempts from queues.task where task_id = $1', [id]);
    expect(task).toEqual([{ max_attempts: 25 }]);
    expect(await failRun((await claimAt(0, id))!)).toBe('retry_scheduled');
    // The retry runs after the backoff, and fails again with attempts left.
    expect(await failRun((await claimAt(6, id))!)).toBe('retry_scheduled');
    const { rows: failed } = await db.query(
      'select count(*)::int as n from queues.task_attempt_failed where task_id = $1',
      [id],
    );
    expect(failed).toEqual([{ n: 2 }]);
  });

  it("a business process's channel task and supervisor runs keep one attempt: the process retries, not the queue", async () => {
    const { rows } = await db
      .pool('app')
      .query(
        `select send_email_task_id::text as id from comms.send_email('a@example.com', 'b@example.com', 's', '<p>h</p>')`,
      );
    const root = rows[0].id as string;
    const clock = new Date(Date.now() + 1000);
    // The first supervisor run enqueues the channel task (and its own next run).
    for (const t of await claimDue(db, clock, ['db_function'])) await processTask(db, t);
    const { rows: tasks } = await db.query(
      `select task_type, max_attempts from queues.task where payload->>'send_email_task_id' = $1 order by task_id`,
      [root],
    );
    expect(tasks.length).toBeGreaterThanOrEqual(3);
    expect(tasks.every((t) => t.max_attempts === 1)).toBe(true);
    expect(tasks.map((t) => t.task_type)).toContain('email');
    const [channel] = (await claimDue(db, clock, ['email'])).filter(
      (t) => String(t.payload.send_email_task_id) === root,
    );
    expect(await failRun(channel)).toBe('completed');
  });
});

describe('dead letters and redrive', () => {
  it('failures handed to an error handler are not dead letters; abandoned ones are', async () => {
    await endPendingTasks(db);
    const handled = await enqueue({ error_handler: 'comms.record_email_failure' }, 1, 'email');
    await failRun((await claimAt(0, handled))!);
    const abandoned = await enqueue({ n: 4 });
    // Six leases expire (the first uncounted): max_leases 5 reached.
    for (let i = 0; i < 6; i++) await claimAt(61 * i, abandoned);
    await db.query(`select * from queues.claim_tasks_at(now() + interval '1 hour', 'w', 100, null, 60, 5)`);
    const { rows } = await db.query(
      'select task_id, outcome from queues.dead_letter where task_id = any($1::bigint[])',
      [[handled, abandoned]],
    );
    expect(rows).toEqual([{ task_id: abandoned, outcome: 'abandoned' }]);
  });

  it('redrive enqueues a copy once, and the original leaves the dead letters', async () => {
    const id = await enqueue({ db_function: 'internal.noop', k: 'redrive' }, 1);
    await failRun((await claimAt(0, id))!);
    const { rows } = await db
      .pool('api')
      .query('select queues.redrive_task($1) as new_id', [id])
      .catch(async () => db.query('select queues.redrive_task($1) as new_id', [id]));
    const newId = rows[0].new_id as string;
    const copy = await db.query('select task_type, payload, max_attempts from queues.task where task_id = $1', [newId]);
    expect(copy.rows).toEqual([
      { task_type: 'db_function', payload: { db_function: 'internal.noop', k: 'redrive' }, max_attempts: 1 },
    ]);
    expect((await db.query('select 1 from queues.dead_letter where task_id = $1', [id])).rowCount).toBe(0);
    expect((await db.query('select new_task_id from queues.task_redriven where task_id = $1', [id])).rows).toEqual([
      { new_task_id: newId },
    ]);
    expect(await claimAt(0, newId)).toBeDefined();
    await expect(db.query('select queues.redrive_task($1)', [id])).rejects.toMatchObject({
      code: '22023',
      message: `task ${id} was already redriven`,
    });
  });

  it('refuses to redrive what is not a dead letter', async () => {
    const pending = await enqueue({ n: 5 });
    await expect(db.query('select queues.redrive_task($1)', [pending])).rejects.toMatchObject({
      code: '22023',
      message: `task ${pending} is not a dead letter`,
    });
    await expect(db.query('select queues.redrive_task(987654321)')).rejects.toMatchObject({ code: '23503' });
    await expect(db.query('select queues.redrive_task(null)')).rejects.toMatchObject({ code: '22004' });
  });
});
