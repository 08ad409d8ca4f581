// Attempts the queue gave up on, ended processes, and at-most-once delivery, for the
// two comms processes. The worker is played by hand (sql/test-support/drive.ts); the
// queue's own claim abandons a task whose leases keep expiring (max_leases 5).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { type ClaimedTask, claimDue, claimUntil, processTask, runAsWorker } from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const CHANNELS = [
  {
    channel: 'email',
    start: async () =>
      (
        await db
          .pool('app')
          .query(
            `select send_email_task_id::int as id from comms.send_email('a@example.com', 'b@example.com', 's', '<p>h</p>')`,
          )
      ).rows[0].id as number,
  },
  {
    channel: 'sms',
    start: async () =>
      (await db.pool('app').query(`select send_sms_task_id::int as id from comms.send_sms('+14155550100', 'code 1')`))
        .rows[0].id as number,
  },
] as const;

/** Claims due tasks at `clock`; returns those of the root, leaving channel tasks leased and unfinished when `dead`. */
async function round(clock: Date, key: string, id: number, dead: boolean): Promise<ClaimedTask[]> {
  const tasks = await claimDue(db, clock);
  const mine: ClaimedTask[] = [];
  tasks.sort((a, b) => Number(a.task_type === 'db_function') - Number(b.task_type === 'db_function'));
  for (const task of tasks) {
    const isMine = String(task.payload[key]) === String(id);
    if (isMine) mine.push(task);
    // The worker dies with it: its lease expires.
    if (dead && isMine && task.task_type !== 'db_function') continue;
    await processTask(db, task);
  }
  return mine;
}

const attempts = async (channel: string, id: number) =>
  (
    await db.query(
      `select a.send_${channel}_attempt_id::int as attempt_id, a.task_id::text, f.error_message, s.send_${channel}_attempt_id is not null as succeeded
         from comms.send_${channel}_attempt a
         left join comms.send_${channel}_attempt_failed f using (send_${channel}_attempt_id)
         left join comms.send_${channel}_attempt_succeeded s using (send_${channel}_attempt_id)
        where a.send_${channel}_task_id = $1 order by 1`,
      [id],
    )
  ).rows;

describe.each(CHANNELS)('$channel', ({ channel, start }) => {
  const key = `send_${channel}_task_id`;

  it("an attempt whose channel task the queue abandoned is failed at the supervisor's next run, and retried", async () => {
    const id = await start();
    let clock = new Date(Date.now() + 1000);
    // Six leases of the channel task expire (the worker dies each time; the first expiry is
    // not counted, the next five are): the claim abandons it. (A claim takes one suspect at
    // a time, so other tests' expired tasks may take a round's turn.)
    const abandoned = async () => {
      const [attempt] = await attempts(channel, id);
      if (!attempt) return false;
      const { rows } = await db.query(`select 1 from queues.task_end where task_id = $1`, [attempt.task_id]);
      return rows.length > 0;
    };
    for (let i = 0; i < 30 && !(await abandoned()); i++) {
      await round(clock, key, id, true);
      clock = new Date(clock.getTime() + 10 * 60 * 1000);
    }
    await round(clock, key, id, true);
    const [first] = await attempts(channel, id);
    const { rows: completed } = await db.query('select outcome from queues.task_end where task_id = $1', [
      first.task_id,
    ]);
    expect(completed).toEqual([{ outcome: 'abandoned' }]);
    expect(first.error_message).toMatch(
      new RegExp(`^the queue gave up on ${channel} task ${first.task_id} \\(abandoned\\)`),
    );
    // The supervisor scheduled the next attempt instead of waiting for the first forever.
    const all = await attempts(channel, id);
    expect(all.length).toBeGreaterThanOrEqual(2);
  });

  it('a channel task completed failed without an outcome (its success handler raised) fails its attempt', async () => {
    const id = await start();
    const clock = new Date(Date.now() + 1000);
    await round(clock, key, id, false); // the supervisor schedules attempt 1
    const [task] = (await claimDue(db, new Date(clock.getTime() + 1000))).filter(
      (t) => String(t.payload[key]) === String(id),
    );
    expect(task.task_type).toBe(channel);
    // What the worker does when the success handler raises: an error row, completion failed.
    await db
      .pool('worker')
      .query('select queues.fail_task($1, $2, $3)', [
        task.task_id,
        'twilio succeeded but comms.record_x_success raised: boom',
        task.task_lease_id,
      ]);
    await db.pool('worker').query(`select queues.complete_task($1, $2, 'failed')`, [task.task_id, task.task_lease_id]);
    const sup = await runAsWorker(db, `comms.send_${channel}_supervisor`, { [key]: id });
    expect(sup).toMatchObject({ success: true, payload: { status: 'attempt_scheduled' } });
    const [first, second] = await attempts(channel, id);
    expect(first.error_message).toBe(
      `the queue gave up on ${channel} task ${task.task_id} (failed): twilio succeeded but comms.record_x_success raised: boom`,
    );
    expect(second).toMatchObject({ error_message: null, succeeded: false });
  });

  it('an attempt still queued when the process ended is not sent (before handler refuses)', async () => {
    const id = await start();
    const clock = new Date(Date.now() + 1000);
    await round(clock, key, id, false);
    // The supervisor gives up during an outage (what run_limit_reached records).
    await db.query(
      `insert into comms.send_${channel}_task_failed (send_${channel}_task_id, reason) values ($1, 'run_limit_reached')`,
      [id],
    );
    const [task] = (await claimDue(db, new Date(clock.getTime() + 1000))).filter(
      (t) => t.task_type === channel && String(t.payload[key]) === String(id),
    );
    let called = 0;
    const done = await processTask(db, task, () => {
      called++;
      return { ok: true };
    });
    expect(called).toBe(0);
    expect(done.result).toEqual({
      success: false,
      validation_failure_message: `send_${channel}_task ${id} already ended (run_limit_reached); not sending attempt ${String(task.payload[`send_${channel}_attempt_id`])}`,
    });
  });
});

describe('delivery modes', () => {
  it('are stated per channel: sms at most once, email and file_delete at least once', async () => {
    const { rows } = await db.query(
      `select task_type, internal.delivery_mode(task_type) as mode from queues.task_type where task_type in ('email', 'sms', 'file_delete', 'db_function') order by 1`,
    );
    expect(rows).toEqual([
      { task_type: 'db_function', mode: 'at_least_once' },
      { task_type: 'email', mode: 'at_least_once' },
      { task_type: 'file_delete', mode: 'at_least_once' },
      { task_type: 'sms', mode: 'at_most_once' },
    ]);
  });

  it('at most once: the first lease records the start; a later lease gets "unknown outcome", and the process ends without a second send', async () => {
    const id = (
      await db.pool('app').query(`select send_sms_task_id::int as id from comms.send_sms('+14155550111', 'once')`)
    ).rows[0].id as number;
    let clock = new Date(Date.now() + 1000);
    await round(clock, 'send_sms_task_id', id, false);
    clock = new Date(clock.getTime() + 1000);
    const [first] = (await claimDue(db, clock)).filter(
      (t) => t.task_type === 'sms' && t.payload.send_sms_task_id === id,
    );
    const start1 = await runAsWorker(db, 'internal.start_provider_call', {
      task_id: first.task_id,
      task_lease_id: first.task_lease_id,
    });
    expect(start1).toEqual({ success: true, payload: { delivery_mode: 'at_most_once', proceed: true } });
    // Again under the same lease (a retry inside one run) still proceeds.
    expect(
      await runAsWorker(db, 'internal.start_provider_call', {
        task_id: first.task_id,
        task_lease_id: first.task_lease_id,
      }),
    ).toMatchObject({
      payload: { proceed: true },
    });
    // The worker dies; the lease expires; the next lease must not call again.
    clock = new Date(clock.getTime() + 10 * 60 * 1000);
    const second = await claimUntil(db, clock, first.task_id);
    const start2 = await runAsWorker(db, 'internal.start_provider_call', {
      task_id: second.task_id,
      task_lease_id: second.task_lease_id,
    });
    expect(start2).toMatchObject({ success: true, payload: { delivery_mode: 'at_most_once', proceed: false } });
    const error = (start2.payload as { error: string }).error;
    expect(error).toMatch(
      new RegExp(
        `^unknown outcome: lease ${first.task_lease_id} started the sms provider call at .* and no outcome was recorded`,
      ),
    );
    await runAsWorker(db, 'comms.record_sms_failure', { original_payload: second.payload, error });
    await db
      .pool('worker')
      .query(`select queues.complete_task($1, $2, 'failed')`, [second.task_id, second.task_lease_id]);
    const sup = await runAsWorker(db, 'comms.send_sms_supervisor', { send_sms_task_id: id });
    expect(sup).toEqual({ status: 'delivery_outcome_unknown' });
    expect((await attempts('sms', id)).length).toBe(1);
  });

  it('at least once records nothing; a lease that is not live is refused', async () => {
    const { rows } = await db.query(`select queues.enqueue('email', '{}') as id`);
    const [task] = (await claimDue(db, new Date(Date.now() + 1000), ['email'])).filter(
      (t) => t.task_id === String(rows[0].id),
    );
    expect(
      await runAsWorker(db, 'internal.start_provider_call', {
        task_id: task.task_id,
        task_lease_id: task.task_lease_id,
      }),
    ).toEqual({
      success: true,
      payload: { delivery_mode: 'at_least_once', proceed: true },
    });
    expect(
      (
        await db.query('select count(*)::int as n from internal.provider_call_started where task_id = $1', [
          task.task_id,
        ])
      ).rows[0].n,
    ).toBe(0);
    expect(
      await runAsWorker(db, 'internal.start_provider_call', { task_id: task.task_id, task_lease_id: 1 }),
    ).toMatchObject({ success: false });
    expect(await runAsWorker(db, 'internal.start_provider_call', { task_id: 'x' })).toEqual({
      success: false,
      validation_failure_message: 'task_id and task_lease_id must be positive integers',
    });
  });
});
