// A channel process whose attempt's queue task went with its history set while the
// process still ran: the queue gave up on the attempt, its supervisor stayed silent (say
// db_function was paused) until retention dropped the set holding that task, and then
// ran. It must still see that the attempt got no outcome and decide as it would have:
// another attempt, the end at max_attempts (the files service no longer signs for the
// file), or delivery_outcome_unknown for an at-most-once call that had started.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { claimDue, drive, pendingFor, processTask, runAsWorker, type Payload } from '../test-support/drive.ts';

const SET = 10;
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await db.query(`update queues.history_setting set partition_size = $1`, [SET]);
});
afterAll(async () => {
  await db?.drop();
});

const HOUR = 3600_000;
let clock = new Date(Date.now() + 1000);
const later = (ms = 2 * HOUR) => (clock = new Date(clock.getTime() + ms));
// What a test enqueues now is due at the clock.
beforeEach(() => {
  clock = new Date(Math.max(clock.getTime(), Date.now() + 1000));
});

/** Moves the task ids to the start of a new partition set (made now, with the ones after it); its lower bound. */
async function freshSet(): Promise<number> {
  const { rows } = await db.query(
    `select max(upper_bound) as top from queues.history_partitions() where not is_default`,
  );
  const base = Number(rows[0].top);
  await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [base - 1]);
  await db.query('select queues.maintain_history_at(now())');
  return base;
}

const statusOf = (result: Payload) =>
  ((result.payload as Payload | undefined)?.status ?? result.status) as string | undefined;

/** Runs every supervisor task due (db_function); their results. */
async function runSupervisors(): Promise<Payload[]> {
  const results: Payload[] = [];
  for (const task of await claimDue(db, clock, ['db_function'])) results.push((await processTask(db, task)).result);
  return results;
}

/**
 * The stranded attempt: the run that schedules it does so at the start of a fresh set
 * (the attempt's task in it), the next run finds it in flight and schedules its successor
 * in the next set, then `giveUp` makes the queue end the attempt's task without an
 * outcome, and retention drops the set. Returns the attempt's queue task.
 */
async function strand(rootKey: string, rootId: string, channel: string, giveUp: (taskId: string) => Promise<void>) {
  const base = await freshSet();
  expect((await runSupervisors()).map(statusOf)).toEqual(['attempt_scheduled']);
  const [attempt] = (await pendingFor(db, rootKey, rootId)).filter((t) => t.task_type === channel);
  expect(Number(attempt.task_id)).toBeGreaterThanOrEqual(base);
  expect(Number(attempt.task_id)).toBeLessThan(base + SET);

  // The next run, in the next set, while the attempt is in flight.
  await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [base + SET - 1]);
  await db.query('select queues.maintain_history_at(now())');
  later();
  expect((await runSupervisors()).map(statusOf)).toEqual(['waiting_for_attempt']);
  const [next] = (await pendingFor(db, rootKey, rootId)).filter((t) => t.task_type === 'db_function');
  expect(Number(next.task_id)).toBeGreaterThanOrEqual(base + SET);

  await giveUp(attempt.task_id);
  const { rows } = await db.query(`select queues.maintain_history_at(now() + interval '8 days') as r`);
  expect(rows[0].r.dropped).toContainEqual([base, base + SET]);
  const { rows: gone } = await db.query('select count(*)::int as n from queues.task where task_id = $1', [
    attempt.task_id,
  ]);
  expect(gone[0].n).toBe(0);
  later(9 * 24 * HOUR);
  return attempt.task_id;
}

describe('a running channel process whose attempt task retention dropped', () => {
  it('file deletion, last attempt: ends max_attempts_reached, stuck, and the files service no longer signs', async () => {
    const { rows: account } = await db.query(
      `insert into accounts.account (email) values ('retention@example.com') returning account_id`,
    );
    const { rows: file } = await db.query(
      `insert into files.file (account_id, bucket, object_key) values ($1, 'recordings', 'r/1.wav') returning file_id::text`,
      [account[0].account_id],
    );
    const fileId = file[0].file_id as string;
    const { rows: kick } = await db
      .pool('app')
      .query('select file_deletion_task_id::text from files.kickoff_file_deletion($1)', [fileId]);
    const rootId = kick[0].file_deletion_task_id as string;

    // Four attempts fail at storage; the run that would schedule the fifth is left pending.
    const failures = async () =>
      Number(
        (
          await db.query(
            `select count(*) as n from files.file_deletion_attempt a
               join files.file_deletion_attempt_failed f using (file_deletion_attempt_id)
              where a.file_deletion_task_id = $1`,
            [rootId],
          )
        ).rows[0].n,
      );
    for (let round = 0; (await failures()) < 4; round++) {
      expect(round).toBeLessThan(20);
      for (const task of await claimDue(db, clock, ['file_delete'])) {
        await processTask(db, task, () => ({ ok: false, error: 'storage answered 503' }));
      }
      if ((await failures()) === 4) break;
      await runSupervisors();
      later();
    }

    const signing = async () =>
      (await runAsWorker(db, 'files.check_file_delete_signing', { bucket: 'recordings', object_key: 'r/1.wav' }))
        .payload as Payload;
    const taskId = await strand('file_deletion_task_id', rootId, 'file_delete', async (id) => {
      const { rows } = await db
        .pool('api')
        .query('select * from admin.cancel_tasks(array[$1::bigint], $2)', [id, 'the queue gives up']);
      expect(rows).toEqual([{ task_id: id, result: 'cancelled' }]);
    });

    expect((await runSupervisors()).map(statusOf)).toEqual(['max_attempts_reached']);
    const { rows: last } = await db.query(
      `select f.error_message from files.file_deletion_attempt a
         join files.file_deletion_attempt_failed f using (file_deletion_attempt_id)
        where a.task_id = $1`,
      [taskId],
    );
    expect(last).toEqual([
      {
        error_message: `the queue gave up on task ${taskId}: its history was dropped by retention before its attempt had an outcome`,
      },
    ]);
    expect(await signing()).toEqual({ scheduled: false, lease_seconds_left: null });
    const { rows: stuck } = await db.query('select files.is_file_deletion_stuck($1) as stuck', [fileId]);
    expect(stuck[0].stuck).toBe(true);
    expect(await pendingFor(db, 'file_deletion_task_id', rootId)).toEqual([]);
  });

  it('email (at least once): the attempt fails and the next attempt is scheduled', async () => {
    const { rows } = await db
      .pool('app')
      .query(
        `select send_email_task_id::text from comms.send_email('from@example.com', 'to@example.com', 'Hi', '<p>hi</p>')`,
      );
    const rootId = rows[0].send_email_task_id as string;
    const taskId = await strand('send_email_task_id', rootId, 'email', async (id) => {
      await db.pool('api').query('select * from admin.cancel_tasks(array[$1::bigint], $2)', [id, 'gives up']);
    });
    expect((await runSupervisors()).map(statusOf)).toEqual(['attempt_scheduled']);
    const { rows: attempts } = await db.query(
      `select a.task_id::text, f.error_message from comms.send_email_attempt a
         left join comms.send_email_attempt_failed f using (send_email_attempt_id)
        where a.send_email_task_id = $1 order by a.send_email_attempt_id`,
      [rootId],
    );
    expect(attempts).toEqual([
      {
        task_id: taskId,
        error_message: `the queue gave up on task ${taskId}: its history was dropped by retention before its attempt had an outcome`,
      },
      { task_id: expect.any(String), error_message: null },
    ]);
    // The next attempt is sent, and the process ends.
    clock = (await drive(db, { start: clock })).clock;
    const { rows: done } = await db.query(
      'select count(*)::int as n from comms.send_email_task_succeeded where send_email_task_id = $1',
      [rootId],
    );
    expect(done[0].n).toBe(1);
  });

  it('SMS (at most once) whose provider call had started: delivery_outcome_unknown, no second call', async () => {
    const { rows } = await db
      .pool('app')
      .query(`select send_sms_task_id::text from comms.send_sms('+15551230001', 'hello')`);
    const rootId = rows[0].send_sms_task_id as string;
    const taskId = await strand('send_sms_task_id', rootId, 'sms', async (id) => {
      // A worker claims it, records the start of the call, and the queue then abandons it.
      const [task] = await claimDue(db, clock, ['sms']);
      expect(task.task_id).toBe(id);
      const started = await runAsWorker(db, 'internal.start_provider_call', {
        task_id: Number(task.task_id),
        task_lease_id: Number(task.task_lease_id),
      });
      expect(started).toMatchObject({ success: true, payload: { delivery_mode: 'at_most_once', proceed: true } });
      await db
        .pool('worker')
        .query(`select * from queues.complete_tasks(array[$1::bigint], array[$2::bigint], array['abandoned'])`, [
          task.task_id,
          task.task_lease_id,
        ]);
    });
    expect((await runSupervisors()).map(statusOf)).toEqual(['delivery_outcome_unknown']);
    const { rows: attempts } = await db.query(
      `select a.task_id::text, f.error_message from comms.send_sms_attempt a
         left join comms.send_sms_attempt_failed f using (send_sms_attempt_id)
        where a.send_sms_task_id = $1`,
      [rootId],
    );
    expect(attempts).toEqual([{ task_id: taskId, error_message: expect.stringMatching(/^unknown outcome: /) }]);
    expect(await pendingFor(db, 'send_sms_task_id', rootId)).toEqual([]);
  });

  it('SMS whose call started and whose task the queue gave up on, history still there: no second call either', async () => {
    const { rows } = await db
      .pool('app')
      .query(`select send_sms_task_id::text from comms.send_sms('+15551230002', 'hello')`);
    const rootId = rows[0].send_sms_task_id as string;
    expect((await runSupervisors()).map(statusOf)).toEqual(['attempt_scheduled']);
    const [task] = await claimDue(db, clock, ['sms']);
    await runAsWorker(db, 'internal.start_provider_call', {
      task_id: Number(task.task_id),
      task_lease_id: Number(task.task_lease_id),
    });
    // Twilio sent it, then the success handler raised: the worker fails the task.
    await db
      .pool('worker')
      .query('select queues.fail_task($1, $2, $3)', [
        task.task_id,
        'twilio succeeded but comms.record_sms_success raised: boom',
        task.task_lease_id,
      ]);
    await db.pool('worker').query(`select queues.complete_task($1, $2, 'failed')`, [task.task_id, task.task_lease_id]);
    later();
    expect((await runSupervisors()).map(statusOf)).toEqual(['delivery_outcome_unknown']);
    const { rows: attempts } = await db.query(
      `select f.error_message from comms.send_sms_attempt a
         left join comms.send_sms_attempt_failed f using (send_sms_attempt_id)
        where a.send_sms_task_id = $1`,
      [rootId],
    );
    expect(attempts).toEqual([
      {
        error_message: expect.stringMatching(
          new RegExp(
            `^unknown outcome: lease ${task.task_lease_id} started the provider call at .* and no outcome was recorded; ` +
              `the queue gave up on sms task ${task.task_id} \\(failed\\): twilio succeeded but comms.record_sms_success raised: boom$`,
          ),
        ),
      },
    ]);
  });
});
