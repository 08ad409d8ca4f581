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

describe('internal.run_before_provider_calls: the before handlers of a group in one statement', () => {
  beforeAll(async () => {
    const worker = db.dbUsers.worker;
    await db.query(`
      create schema fixture_bpc;
      create table fixture_bpc.call (key text not null, traceparent text);
      -- Records its call, then raises or answers the provider payload {to: key}.
      create function fixture_bpc.before(payload jsonb) returns jsonb
        language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
      begin
        insert into fixture_bpc.call values (payload->>'key', nullif(current_setting('queue.traceparent', true), ''));
        case payload->>'answer'
          when 'raise' then raise exception 'before broke for %', payload->>'key';
          when 'conflict' then raise exception 'could not serialize access' using errcode = '40001';
          else return jsonb_build_object('success', true, 'payload', jsonb_build_object('to', payload->>'key'));
        end case;
      end $$;
      revoke execute on all functions in schema fixture_bpc from public;
      grant usage on schema fixture_bpc to ${worker};
      grant execute on all functions in schema fixture_bpc to ${worker};
      select internal.register_runnable_function('fixture_bpc.before(jsonb)');
    `);
  });

  interface Row {
    ord: number;
    before_result: Record<string, unknown> | null;
    start_result: Record<string, unknown> | null;
    start_error: string | null;
    before_error: string | null;
    before_sqlstate: string | null;
  }
  const runGroup = async (calls: unknown) =>
    (
      await db
        .pool('worker')
        .query<Row>(`select * from internal.run_before_provider_calls($1::jsonb) order by ord`, [JSON.stringify(calls)])
    ).rows;
  const call = (lease: Lease, key: string, answer = 'ok') => ({
    before_handler: 'fixture_bpc.before',
    payload: { key, answer },
    task_id: lease.task_id,
    task_lease_id: lease.task_lease_id,
  });
  const keysCalled = async () =>
    (await db.query<{ key: string }>('select key from fixture_bpc.call order by key')).rows.map((r) => r.key);
  const proceed = { success: true, payload: { delivery_mode: 'at_least_once', proceed: true } };

  it('one raises, one lost its lease, the others succeed: each call its own answer, the raise’s writes rolled back alone', async () => {
    await db.query('truncate fixture_bpc.call');
    const [a, b, c, d] = [
      await claimOne('email', new Date(), 60),
      await claimOne('email', new Date(), 60),
      await claimOne('email', new Date(), 60),
      await claimOne('email', new Date(), 60),
    ];
    await db.query(`select * from queues.release_leases(array[$1]::bigint[], array[$2]::bigint[])`, [
      c.task_id,
      c.task_lease_id,
    ]);
    const rows = await runGroup([call(a, 'a'), call(b, 'b', 'raise'), call(c, 'c'), call(d, 'd')]);
    expect(rows).toEqual([
      {
        ord: 1,
        before_result: { success: true, payload: { to: 'a' } },
        start_result: proceed,
        start_error: null,
        before_error: null,
        before_sqlstate: null,
      },
      {
        ord: 2,
        before_result: null,
        start_result: null,
        start_error: null,
        before_error: 'before broke for b',
        before_sqlstate: 'P0001',
      },
      {
        ord: 3,
        before_result: { success: true, payload: { to: 'c' } },
        start_result: {
          success: false,
          validation_failure_message: `lease ${c.task_lease_id} is not the live lease of task ${c.task_id}; not calling the provider`,
        },
        start_error: null,
        before_error: null,
        before_sqlstate: null,
      },
      {
        ord: 4,
        before_result: { success: true, payload: { to: 'd' } },
        start_result: proceed,
        start_error: null,
        before_error: null,
        before_sqlstate: null,
      },
    ]);
    // b's insert rolled back with its raise; the others' writes committed with the statement.
    expect(await keysCalled()).toEqual(['a', 'c', 'd']);
  });

  it('a serialization failure of one call is that call’s SQLSTATE (the worker interrupts that task alone)', async () => {
    await db.query('truncate fixture_bpc.call');
    const a = await claimOne('email', new Date(), 60);
    const b = await claimOne('email', new Date(), 60);
    const rows = await runGroup([call(a, 'a', 'conflict'), call(b, 'b')]);
    expect(rows.map((r) => [r.ord, r.before_sqlstate, r.start_result])).toEqual([
      [1, '40001', null],
      [2, null, proceed],
    ]);
    expect(await keysCalled()).toEqual(['b']);
  });

  it('an at-most-once task in a group: no check made, nothing recorded (the worker records the start itself)', async () => {
    const sms = await claimOne('sms', new Date(), 60);
    const rows = await runGroup([call(sms, 's')]);
    expect(rows[0]).toMatchObject({ before_result: { success: true }, start_result: null, before_error: null });
    const { rows: started } = await db.query('select 1 from internal.provider_call_started where task_id = $1', [
      sms.task_id,
    ]);
    expect(started).toEqual([]);
  });

  it('a call’s traceparent is set for its handler only and cleared after it', async () => {
    await db.query('truncate fixture_bpc.call');
    const a = await claimOne('email', new Date(), 60);
    const b = await claimOne('email', new Date(), 60);
    const tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    await runGroup([{ ...call(a, 'a'), traceparent: tp }, call(b, 'b')]);
    expect((await db.query('select key, traceparent from fixture_bpc.call order by key')).rows).toEqual([
      { key: 'a', traceparent: tp },
      { key: 'b', traceparent: null },
    ]);
  });

  it('refuses what is not an array, and more than 50 calls', async () => {
    await expect(runGroup({})).rejects.toMatchObject({ code: '22023' });
    const a = await claimOne('email', new Date(), 60);
    await expect(runGroup(Array.from({ length: 51 }, () => call(a, 'x')))).rejects.toMatchObject({ code: '22023' });
    expect(await runGroup([])).toEqual([]);
  });
});
