// internal.start_provider_call judges a lease as the queue does: the task's current lease
// with the expiry its heartbeats moved (queues.current_lease_expiry), not the expiry the
// claim wrote. The clock moves through the owner-only *_at functions.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { runAsWorker } from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

interface Lease {
  task_id: string;
  task_lease_id: string;
}

/** Enqueues one task of `taskType`, due at `at`, and claims it then with a lease of `leaseSeconds`. */
async function claimOne(taskType: string, at: Date, leaseSeconds: number): Promise<Lease> {
  const { rows: enqueued } = await db.query<{ id: string }>(`select queues.enqueue($1, '{}', $2)::text as id`, [
    taskType,
    at,
  ]);
  const { rows } = await db.query<Lease>(
    `select task_id::text, task_lease_id::text
       from queues.claim_tasks_at(_now => $1, _worker_id => 'delivery-test', _limit => 1000,
                                  _task_types => array[$2], _lease_seconds => $3, _max_leases => 5)`,
    [at, taskType, leaseSeconds],
  );
  const lease = rows.find((r) => r.task_id === enqueued[0].id);
  if (!lease) throw new Error(`task ${enqueued[0].id} was not claimed`);
  return lease;
}

const heartbeat = async (lease: Lease, at: Date, seconds: number): Promise<number> =>
  (
    await db.query(`select * from queues.extend_leases_at($1, array[$2]::bigint[], array[$3]::bigint[], $4)`, [
      at,
      lease.task_id,
      lease.task_lease_id,
      seconds,
    ])
  ).rowCount ?? 0;

const startAt = async (lease: Lease, at: Date) =>
  (
    await db.query<{ r: Record<string, unknown> }>(`select internal.start_provider_call_at($1, $2::jsonb) as r`, [
      at,
      JSON.stringify({ task_id: lease.task_id, task_lease_id: lease.task_lease_id }),
    ])
  ).rows[0].r;

const plus = (at: Date, ms: number) => new Date(at.getTime() + ms);

describe('internal.start_provider_call: the live lease', () => {
  it.each(['email', 'sms'])(
    '%s: a 2-second lease kept alive by six heartbeats past its first expiry may call the provider',
    async (taskType) => {
      const t0 = new Date(Date.now() + 3_600_000);
      const lease = await claimOne(taskType, t0, 2);
      // Heartbeats every half second, each for 2 s, for 3 s: the claim's expiry (t0 + 2 s)
      // is long past at t0 + 3.5 s; the heartbeats' (t0 + 5 s) is not.
      for (let i = 1; i <= 6; i++) expect(await heartbeat(lease, plus(t0, i * 500), 2)).toBe(1);
      const at = plus(t0, 3_500);
      // The queue agrees the lease is live: it is current, and its completion would be fenced in.
      const { rows } = await db.query(
        `select queues.is_current_lease($1, $2) as current, queues.current_lease_expiry($1, $2) > $3 as live`,
        [lease.task_id, lease.task_lease_id, at],
      );
      expect(rows[0]).toEqual({ current: true, live: true });
      expect(await startAt(lease, at)).toEqual({
        success: true,
        payload: { delivery_mode: taskType === 'sms' ? 'at_most_once' : 'at_least_once', proceed: true },
      });
      // Past the heartbeats' expiry, it is refused.
      expect(await startAt(lease, plus(t0, 5_001))).toEqual({
        success: false,
        validation_failure_message: `lease ${lease.task_lease_id} is not the live lease of task ${lease.task_id}; not calling the provider`,
      });
    },
  );

  it('an expired lease with no heartbeat is refused, and nothing is recorded', async () => {
    const t0 = new Date(Date.now() + 7_200_000);
    const lease = await claimOne('sms', t0, 2);
    expect(await startAt(lease, plus(t0, 1_000))).toMatchObject({ success: true, payload: { proceed: true } });
    const before = await db.query('select count(*)::int as n from internal.provider_call_started where task_id = $1', [
      lease.task_id,
    ]);
    expect(await startAt(lease, plus(t0, 2_000))).toMatchObject({ success: false });
    expect(await startAt(lease, plus(t0, 2_500))).toMatchObject({ success: false });
    const after = await db.query('select count(*)::int as n from internal.provider_call_started where task_id = $1', [
      lease.task_id,
    ]);
    expect(after.rows[0].n).toBe(before.rows[0].n);
  });

  it('a released lease, a completed task and a lease taken over are refused', async () => {
    const t0 = new Date(Date.now() + 10_800_000);
    const released = await claimOne('email', t0, 60);
    await db.query(`select * from queues.release_leases(array[$1]::bigint[], array[$2]::bigint[])`, [
      released.task_id,
      released.task_lease_id,
    ]);
    expect(await startAt(released, plus(t0, 1_000))).toMatchObject({ success: false });

    const completed = await claimOne('email', plus(t0, 1_000), 60);
    await db.query(`select queues.complete_task($1, $2, 'succeeded')`, [completed.task_id, completed.task_lease_id]);
    expect(await startAt(completed, plus(t0, 2_000))).toMatchObject({ success: false });

    const first = await claimOne('email', plus(t0, 2_000), 2);
    const { rows } = await db.query<Lease>(
      `select task_id::text, task_lease_id::text
         from queues.claim_tasks_at(_now => $1, _worker_id => 'delivery-test-2', _limit => 1000,
                                    _task_types => array['email'], _lease_seconds => 60, _max_leases => 5)
        where task_id = $2`,
      [plus(t0, 5_000), first.task_id],
    );
    expect(rows).toHaveLength(1);
    // The first lease is no longer the task's, even where its own expiry has not come.
    expect(await startAt(first, plus(t0, 3_000))).toMatchObject({ success: false });
    expect(await startAt(rows[0], plus(t0, 6_000))).toMatchObject({ success: true, payload: { proceed: true } });
  });

  it('through the worker: a lease claimed with 2 seconds, heartbeats since, is live by now()', async () => {
    // Claimed a minute ago for 2 s; heartbeats (as the worker's, for 2 s each) kept it
    // current through that minute; the last, just now, through queues.extend_leases.
    const t0 = new Date(Date.now() - 60_000);
    const lease = await claimOne('email', t0, 2);
    for (let i = 1; i <= 59; i++) expect(await heartbeat(lease, plus(t0, i * 1_000), 2)).toBe(1);
    await db
      .pool('worker')
      .query(`select * from queues.extend_leases(array[$1]::bigint[], array[$2]::bigint[], 60)`, [
        lease.task_id,
        lease.task_lease_id,
      ]);
    expect(
      await runAsWorker(db, 'internal.start_provider_call', {
        task_id: lease.task_id,
        task_lease_id: lease.task_lease_id,
      }),
    ).toEqual({ success: true, payload: { delivery_mode: 'at_least_once', proceed: true } });
    // An expired lease with no heartbeat, through the worker: refused.
    const stale = await claimOne('email', new Date(Date.now() - 60_000), 2);
    expect(
      await runAsWorker(db, 'internal.start_provider_call', {
        task_id: stale.task_id,
        task_lease_id: stale.task_lease_id,
      }),
    ).toMatchObject({ success: false });
  });
});

describe('internal.run_before_provider_call: the before_handler and the check in one statement', () => {
  interface Ran {
    before_result: Record<string, unknown> | null;
    start_result: Record<string, unknown> | null;
    start_error: string | null;
  }
  // As the worker calls it, at now().
  const run = async (handler: string, payload: unknown, lease: Lease): Promise<Ran> =>
    (
      await db.pool('worker').query<Ran>(
        `select before_result, start_result, start_error
             from internal.run_before_provider_call($1, $2::jsonb, $3::bigint, $4::bigint)`,
        [handler, JSON.stringify(payload), lease.task_id, lease.task_lease_id],
      )
    ).rows[0];
  const started = async (lease: Lease): Promise<number> =>
    (
      await db.query<{ n: number }>(
        'select count(*)::int as n from internal.provider_call_started where task_id = $1',
        [lease.task_id],
      )
    ).rows[0].n;

  it('an at-least-once task: the handler’s result and the check’s answer, nothing recorded', async () => {
    const lease = await claimOne('email', new Date(), 60);
    expect(await run('internal.noop', {}, lease)).toEqual({
      before_result: { success: true },
      start_result: { success: true, payload: { delivery_mode: 'at_least_once', proceed: true } },
      start_error: null,
    });
    expect(await started(lease)).toBe(0);
  });

  it('an at-least-once task whose lease is not live: the check refuses it', async () => {
    const lease = await claimOne('email', new Date(), 60);
    await db.query(`select * from queues.release_leases(array[$1]::bigint[], array[$2]::bigint[])`, [
      lease.task_id,
      lease.task_lease_id,
    ]);
    expect((await run('internal.noop', {}, lease)).start_result).toEqual({
      success: false,
      validation_failure_message: `lease ${lease.task_lease_id} is not the live lease of task ${lease.task_id}; not calling the provider`,
    });
  });

  it('an at-most-once task: no check made and nothing recorded (the worker records the start itself)', async () => {
    const lease = await claimOne('sms', new Date(), 60);
    expect(await run('internal.noop', {}, lease)).toEqual({
      before_result: { success: true },
      start_result: null,
      start_error: null,
    });
    expect(await started(lease)).toBe(0);
  });

  it('a handler that does not succeed: its result, and no check', async () => {
    const lease = await claimOne('email', new Date(), 60);
    const ran = await run('comms.get_email_payload', {}, lease);
    expect(ran.before_result).toMatchObject({ success: false });
    expect(ran.start_result).toBeNull();
    expect(ran.start_error).toBeNull();
  });

  it('a handler that raises: the statement raises', async () => {
    const lease = await claimOne('sms', new Date(), 60);
    await expect(run('internal.no_such_handler', {}, lease)).rejects.toMatchObject({ code: '42883' });
    expect(await started(lease)).toBe(0);
  });
});
