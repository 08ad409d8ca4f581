// Cancelling running tasks (sql/queues/cancel.sql): the app's queues.cancel_tasks, the
// worker's queues.cancelled_tasks, a worker dead while holding a cancelled task, and a
// process supervisor seeing its cancelled running channel task as an outcome.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { claimDue, runAsWorker } from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

async function reset(): Promise<void> {
  await db.query('alter table queues.task disable trigger forbid_update');
  await db.query('truncate queues.task cascade');
  await db.query('alter table queues.task enable trigger forbid_update');
}

const appEnqueue = async (): Promise<string> =>
  (await db.pool('app').query<{ id: string }>(`select queues.enqueue('product_resync', '{"store_id": 1}') as id`))
    .rows[0].id;
const claim = async (worker = 'w1', leaseSeconds = 60) =>
  (
    await db.pool('worker').query<{
      task_id: string;
      task_lease_id: string;
    }>(`select task_id, task_lease_id from queues.claim_tasks($1, 100, null, $2)`, [worker, leaseSeconds])
  ).rows;
const counts = async () =>
  (
    await db.query(
      `select (select count(*)::int from queues.task_end) as completed,
              (select count(*)::int from queues.task_cancelled) as cancelled,
              (select count(*)::int from queues.task_pending) as pending,
              (select count(*)::int from queues.task_lease_revocation) as revoked`,
    )
  ).rows[0];

describe('queues.cancel_tasks (the app) and queues.cancelled_tasks (the worker)', () => {
  beforeEach(reset);

  it('the app cancels its running task; the worker learns why; its late completion is refused', async () => {
    const running = await appEnqueue();
    const [lease] = await claim();
    const pending = await appEnqueue();
    const { rows } = await db
      .pool('app')
      .query('select * from queues.cancel_tasks($1::bigint[], $2)', [[running, pending, '999999'], 'store closed']);
    expect(rows).toEqual([
      { task_id: running, result: 'cancelled', was_running: true },
      { task_id: pending, result: 'cancelled', was_running: false },
      { task_id: '999999', result: 'unknown_task', was_running: false },
    ]);
    // The heartbeat no longer extends the lease: the worker asks why.
    const extended = await db
      .pool('worker')
      .query(`select * from queues.extend_leases(array[$1::bigint], array[$2::bigint], 60)`, [
        running,
        lease.task_lease_id,
      ]);
    expect(extended.rows).toEqual([]);
    const why = await db
      .pool('worker')
      .query(`select task_id, reason from queues.cancelled_tasks($1::bigint[])`, [[running, '999999']]);
    expect(why.rows).toEqual([{ task_id: running, reason: 'store closed' }]);
    // Whatever the processor does afterwards is refused, and the task stays cancelled.
    await expect(
      db.pool('worker').query('select queues.fail_task($1, $2, $3)', [running, 'late error', lease.task_lease_id]),
    ).rejects.toMatchObject({ code: '55000' });
    const late = await db
      .pool('worker')
      .query(`select * from queues.complete_tasks(array[$1::bigint], array[$2::bigint])`, [
        running,
        lease.task_lease_id,
      ]);
    expect(late.rows).toEqual([{ task_id: running, result: 'lease_lost' }]);
    const { rows: ended } = await db.query(`select task_id::text, outcome from queues.task_end order by 1`);
    expect(ended).toEqual([
      { task_id: running, outcome: 'cancelled' },
      { task_id: pending, outcome: 'cancelled' },
    ]);
    // Cancelling again answers already_completed and writes nothing.
    const before = await counts();
    const again = await db.pool('app').query('select result from queues.cancel_tasks($1::bigint[])', [[running]]);
    expect(again.rows).toEqual([{ result: 'already_completed' }]);
    expect(await counts()).toEqual(before);
  });

  it('refuses the app a worker-only task type (a channel task), writing nothing; the owner may', async () => {
    const own = await appEnqueue();
    const { rows } = await db.query<{ id: string }>(`select queues.enqueue_internal('email', '{}') as id`);
    const before = await counts();
    await expect(
      db.pool('app').query('select * from queues.cancel_tasks($1::bigint[])', [[own, rows[0].id]]),
    ).rejects.toMatchObject({
      code: '42501',
      message: expect.stringContaining(`task ${rows[0].id} is of a worker-only`),
    });
    expect(await counts()).toEqual(before);
    const owner = await db.query('select result from queues.cancel_tasks($1::bigint[])', [[rows[0].id]]);
    expect(owner.rows).toEqual([{ result: 'cancelled' }]);
  });

  it.each([
    ['null ids', [null, null], '22004', 'task_ids must not be null'],
    ['no ids', [[], null], '22023', '1 to 1000'],
    ['a null id', [['1', null], null], '22004', 'must not contain null'],
    ['a repeated id', [['1', '1'], null], '22023', 'must not repeat'],
    ['too many ids', [Array.from({ length: 1001 }, (_, i) => String(i + 1)), null], '22023', '1 to 1000'],
    ['a long reason', [['1'], 'x'.repeat(501)], '22023', 'reason must be at most 500'],
  ])('refuses %s and writes nothing', async (_name, args, code, message) => {
    await appEnqueue();
    await claim();
    const before = await counts();
    await expect(
      db.pool('app').query('select * from queues.cancel_tasks($1::bigint[], $2)', args as unknown[]),
    ).rejects.toMatchObject({ code, message: expect.stringContaining(message) });
    expect(await counts()).toEqual(before);
  });

  it('a worker killed while holding a cancelled task: nothing comes back, stale recovery finds nothing to revoke', async () => {
    const ids = [await appEnqueue(), await appEnqueue(), await appEnqueue()];
    await db.pool('worker').query(`select queues.record_worker_heartbeat('doomed', '{product_resync}', 1000)`);
    const leases = await claim('doomed', 7200);
    expect(leases).toHaveLength(3);
    // The worker started them, then died.
    await db
      .pool('worker')
      .query(`select * from queues.mark_started($1::bigint[], $2::bigint[])`, [
        leases.map((l) => l.task_id),
        leases.map((l) => l.task_lease_id),
      ]);
    await db.pool('app').query('select * from queues.cancel_tasks($1::bigint[])', [ids.slice(0, 2)]);
    // An hour later, the worker silent: stale recovery revokes only the lease of the task
    // not cancelled, and only that task is claimed again.
    const later = new Date(Date.now() + 3600_000);
    const stale = await db.query(`select task_id::text from queues.recover_stale_leases_at($1, 1)`, [later]);
    expect(stale.rows).toEqual([{ task_id: ids[2] }]);
    const claimed = await claimDue(db, later);
    expect(claimed.map((t) => t.task_id)).toEqual([ids[2]]);
    const { rows } = await db.query(
      `select task_id::text, outcome from queues.task_end where task_id = any($1::bigint[]) order by 1`,
      [ids],
    );
    expect(rows).toEqual([
      { task_id: ids[0], outcome: 'cancelled' },
      { task_id: ids[1], outcome: 'cancelled' },
    ]);
  });

  it('16 concurrent cancels of one running task: one cancels it, the others find it completed', async () => {
    const id = await appEnqueue();
    await claim();
    const answers = await Promise.all(
      Array.from({ length: 16 }, () =>
        db.pool('app').query<{ result: string }>('select result from queues.cancel_tasks(array[$1::bigint])', [id]),
      ),
    );
    const tally = answers.map((a) => a.rows[0].result).sort();
    expect(tally).toEqual([...Array.from({ length: 15 }, () => 'already_completed'), 'cancelled']);
    expect(await counts()).toMatchObject({ completed: 1, cancelled: 1, revoked: 1, pending: 0 });
  });
});

describe('a process supervisor and its cancelled running channel task', () => {
  beforeEach(reset);

  it('fails the attempt with the cancel reason, as for an abandoned task, and goes on', async () => {
    const { rows } = await db
      .pool('app')
      .query(
        `select send_email_task_id::int as id from comms.send_email('a@example.com', 'b@example.com', 's', '<p>h</p>')`,
      );
    const id = rows[0].id as number;
    const clock = new Date(Date.now() + 1000);
    // The supervisor's first run schedules attempt 1; its email task is claimed and started.
    for (const task of await claimDue(db, clock)) {
      await runAsWorker(db, String(task.payload.db_function), task.payload);
      await db.pool('worker').query('select queues.complete_task($1, $2)', [task.task_id, task.task_lease_id]);
    }
    const [email] = (await claimDue(db, new Date(clock.getTime() + 1000))).filter((t) => t.task_type === 'email');
    expect(email).toBeDefined();
    await db
      .pool('worker')
      .query(`select * from queues.mark_started(array[$1::bigint], array[$2::bigint])`, [
        email.task_id,
        email.task_lease_id,
      ]);
    const cancelled = await db
      .pool('api')
      .query(`select * from admin.cancel_tasks(array[$1::bigint], 'wrong recipient')`, [email.task_id]);
    expect(cancelled.rows).toEqual([{ task_id: email.task_id, result: 'cancelled' }]);
    const sup = await runAsWorker(db, 'comms.send_email_supervisor', { send_email_task_id: id });
    expect(sup).toMatchObject({ success: true });
    const { rows: attempts } = await db.query(
      `select a.task_id::text, f.error_message from comms.send_email_attempt a
         left join comms.send_email_attempt_failed f using (send_email_attempt_id)
        where a.send_email_task_id = $1 order by a.send_email_attempt_id`,
      [id],
    );
    expect(attempts[0]).toEqual({
      task_id: email.task_id,
      error_message: `the queue gave up on email task ${email.task_id} (cancelled): wrong recipient`,
    });
  });
});
