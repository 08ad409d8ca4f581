// The queue's answers where task code, other claimers, late heartbeats and stale
// recovery meet: lease loss named only by the queue, fenced completions after someone
// else completed the task, resource keys and expired leases, stale bounds derived from
// each worker's heartbeat interval, and bounded inputs.
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

interface Lease {
  task_id: string;
  task_lease_id: string;
  resource_key?: string | null;
}

async function enqueue(resourceKey: string | null = null, maxAttempts: number | null = 1): Promise<string> {
  const { rows } = await db
    .pool('owner')
    .query(`select queues.enqueue('db_function', '{"db_function": "internal.noop"}', null, null, $1, $2) as id`, [
      resourceKey,
      maxAttempts,
    ]);
  return rows[0].id;
}

/** Claims as the owner at now + `seconds`, with 60 s leases. */
async function claimAt(seconds: number, worker = 'w', limit = 1, maxLeases = 5): Promise<Lease[]> {
  const { rows } = await db.query<Lease>(
    `select c.task_id, c.task_lease_id, c.resource_key
       from queues.claim_tasks_at(now() + make_interval(secs => $1), $2, $3, null, 60, $4) c`,
    [seconds, worker, limit, maxLeases],
  );
  return rows;
}

async function extendAt(seconds: number, leases: Lease[]): Promise<Lease[]> {
  const { rows } = await db.query<Lease>(
    `select task_id, task_lease_id from queues.extend_leases_at(now() + make_interval(secs => $1), $2::bigint[], $3::bigint[], 60)`,
    [seconds, leases.map((l) => l.task_id), leases.map((l) => l.task_lease_id)],
  );
  return rows;
}

async function completeMany(leases: Lease[]): Promise<string[]> {
  const { rows } = await db
    .pool('worker')
    .query('select result from queues.complete_tasks($1::bigint[], $2::bigint[])', [
      leases.map((l) => l.task_id),
      leases.map((l) => l.task_lease_id),
    ]);
  return rows.map((r) => r.result);
}

const count = async (sql: string, params: unknown[] = []) => (await db.query(sql, params)).rows[0].n as number;
/** A task with no end yet (with or without a claim-index row: the ready set). */
const UNFINISHED = `select count(*)::int as n from queues.task t
                     where t.task_id = $1 and not exists (select 1 from queues.task_end_of(t.task_id) e)`;

describe('lease loss is the queue’s own answer', () => {
  it('complete_task and fail_task mark lease loss (schema queues, constraint task_lease_current); an append-only trigger does not', async () => {
    const id = await enqueue();
    const [stale] = await claimAt(0, 'stale');
    await claimAt(61, 'fresh');
    const worker = db.pool('worker');
    await expect(worker.query('select queues.complete_task($1, $2)', [id, stale.task_lease_id])).rejects.toMatchObject({
      code: '55000',
      schema: 'queues',
      constraint: 'task_lease_current',
    });
    await expect(
      worker.query('select queues.fail_task($1, $2, $3)', [id, 'late', stale.task_lease_id]),
    ).rejects.toMatchObject({
      code: '55000',
      schema: 'queues',
      constraint: 'task_lease_current',
    });
    // The same SQLSTATE from the append-only trigger (which task code can reach) carries no marker.
    const error = await db.query('update queues.task set priority = 1 where false').catch((e: unknown) => e);
    expect(error).toMatchObject({ code: '55000' });
    expect((error as { constraint?: string }).constraint).toBeUndefined();
  });
});

describe('a fenced completion after someone else completed the task', () => {
  it('abandoned by another claimer: the holder’s fenced completion is lease_lost, not already_completed', async () => {
    const id = await enqueue();
    // A first lease expires (uncounted): the holder's lease names the task its suspect.
    await claimAt(0, 'crashed');
    const [holder] = await claimAt(61, 'holder');
    // Another claimer finds that lease expired too and abandons the task (max_leases 1).
    expect(await claimAt(122, 'other', 1, 1)).toEqual([]);
    expect((await db.query('select outcome from queues.task_end where task_id = $1', [id])).rows).toEqual([
      { outcome: 'abandoned' },
    ]);
    expect(await completeMany([holder])).toEqual(['lease_lost']);
    await expect(
      db.pool('worker').query('select queues.complete_task($1, $2)', [id, holder.task_lease_id]),
    ).rejects.toMatchObject({
      code: '55000',
    });
    // Nor may it record an error against the task someone else completed.
    await expect(
      db.pool('worker').query('select queues.fail_task($1, $2, $3)', [id, 'late', holder.task_lease_id]),
    ).rejects.toMatchObject({ code: '55000', constraint: 'task_lease_current' });
  });

  it('completed without a lease by someone else: the holder’s fenced completion is lease_lost', async () => {
    const id = await enqueue();
    const [holder] = await claimAt(0, 'holder');
    await db
      .pool('worker')
      .query(`select * from queues.complete_tasks(array[$1]::bigint[], null, array['cancelled'])`, [id]);
    expect(await completeMany([holder])).toEqual(['lease_lost']);
    await expect(
      db.pool('worker').query('select queues.complete_task($1, $2)', [id, holder.task_lease_id]),
    ).rejects.toMatchObject({
      code: '55000',
    });
  });

  it('the holder repeating its own completion is still already_completed (idempotent)', async () => {
    await enqueue();
    const [holder] = await claimAt(0, 'holder');
    expect(await completeMany([holder])).toEqual(['completed']);
    expect(await completeMany([holder])).toEqual(['already_completed']);
  });
});

describe('resource keys and late heartbeats', () => {
  it('the exact race: T1 misses its heartbeat, T2 takes key K, T1’s late heartbeat and completion are refused', async () => {
    const t1 = await enqueue('K');
    const [l1] = await claimAt(0, 'w1');
    expect(l1.task_id).toBe(t1);
    // Two more tasks on K, ahead of T1 in claim order.
    const [t2, t3] = await Promise.all(
      [10, 5].map(async (priority) => {
        const { rows } = await db
          .pool('owner')
          .query(`select queues.enqueue('db_function', '{"db_function": "internal.noop"}', null, $1, 'K') as id`, [
            priority,
          ]);
        return rows[0].id as string;
      }),
    );
    // T1's lease expired at 60 s; at 61 s T2 takes K.
    const [l2] = await claimAt(61, 'w2', 10);
    expect(l2.task_id).toBe(t2);
    // T1's heartbeat arrives late: its lease must not come back to life.
    expect(await extendAt(62, [l1])).toEqual([]);
    // K stays T2's: neither T3 nor T1 is claimed while T2's lease lives.
    expect(await claimAt(63, 'w3', 10)).toEqual([]);
    expect(await completeMany([l1])).toEqual(['lease_lost']);
    expect(await count('select count(*)::int as n from queues.task_end where task_id = $1', [t1])).toBe(0);
    expect(t3).toBeDefined();
  });

  it('T1 expired, T2 took K and completed: T1 can neither extend nor complete', async () => {
    const t1 = await enqueue('K2', null);
    const [l1] = await claimAt(0, 'w1');
    expect(l1.task_id).toBe(t1);
    // A second task on the key, scheduled first in order by priority.
    const { rows } = await db
      .pool('owner')
      .query(`select queues.enqueue('db_function', '{"db_function": "internal.noop"}', null, 10, 'K2') as id`);
    const t2 = rows[0].id as string;
    const [l2] = await claimAt(61, 'w2');
    expect(l2.task_id).toBe(t2);
    expect(await extendAt(62, [l1])).toEqual([]);
    expect(await completeMany([l2])).toEqual(['completed']);
    expect(await extendAt(63, [l1])).toEqual([]);
    expect(await completeMany([l1])).toEqual(['lease_lost']);
  });

  it('an expired lease whose key nobody took is still extended', async () => {
    await enqueue('K3');
    const [l1] = await claimAt(0, 'w1');
    expect(await extendAt(70, [l1])).toHaveLength(1);
    expect(await completeMany([l1])).toEqual(['completed']);
  });

  it('concurrently: 20 keys, claimers and late heartbeats never give two tasks live leases on one key', async () => {
    const keys = Array.from({ length: 20 }, (_, i) => `key-${i}`);
    for (const key of keys) for (let i = 0; i < 3; i++) await enqueue(key);
    // Rounds of the clock, 40 s apart with 60 s leases: a holder that skips a round's
    // heartbeat is expired by the next one. Each round, four claimers and the holders'
    // on-time heartbeats run concurrently, then the late heartbeats arrive.
    const held: Lease[] = [];
    let contested = 0;
    let doubleHeld = 0;
    for (let round = 1; round <= 12; round++) {
      const at = round * 40;
      const mine = held.splice(0);
      const late = mine.filter((_, i) => (i + round) % 3 === 0);
      const onTime = mine.filter((_, i) => (i + round) % 3 !== 0);
      const [claims, extended] = await Promise.all([
        Promise.all([0, 1, 2, 3].map((c) => claimAt(at, `c${c}`, 3))),
        extendAt(at - 30, onTime),
      ]);
      const claimedKeys = new Set(claims.flat().map((l) => l.resource_key));
      contested += late.filter((l) => claimedKeys.has(l.resource_key)).length;
      const revived = await extendAt(at + 1, late);
      // The invariant at this moment of the clock: one live lease per key.
      doubleHeld += await count(
        `select count(*)::int as n from (
           select p.resource_key from queues.task_pending p
            where p.resource_key like 'key-%' and p.current_lease_id is not null
              and p.available_at > now() + make_interval(secs => $1)
            group by p.resource_key having count(*) > 1) x`,
        [at + 1],
      );
      const alive = [...extended, ...revived].map((l) =>
        mine.find((m) => m.task_id === l.task_id && m.task_lease_id === l.task_lease_id)!,
      );
      // Half of the live holders complete, the others go on.
      await completeMany(alive.filter((_, i) => i % 2 === 0));
      held.push(...alive.filter((_, i) => i % 2 === 1), ...claims.flat());
    }
    expect(contested).toBeGreaterThan(0);
    expect(doubleHeld).toBe(0);
  });
});

describe('stale recovery', () => {
  it('a worker heartbeating every 30 s is not stale 11 s after its last heartbeat, whatever bound is asked', async () => {
    const id = await enqueue();
    const worker = db.pool('worker');
    // No interval given: the documented default of 30 s is assumed.
    await worker.query(`select queues.record_worker_heartbeat('healthy', array['db_function'])`);
    const [lease] = (
      await worker.query(`select task_id, task_lease_id from queues.claim_tasks('healthy', 1, null, 300)`)
    ).rows;
    expect(lease.task_id).toBe(id);
    const revoked = await db.query(`select * from queues.recover_stale_leases_at(now() + interval '11 seconds', 10)`);
    expect(revoked.rows).toEqual([]);
    // Silent for longer than three of its heartbeat intervals, it is stale.
    const late = await db.query(
      `select task_id from queues.recover_stale_leases_at(now() + interval '91 seconds', 10)`,
    );
    expect(late.rows).toEqual([{ task_id: id }]);
  });

  it("a stale worker's revocation counts towards abandonment for the run a heartbeat marked started, not for the task that only waited; the rebuild agrees", async () => {
    const ids = [await enqueue(), await enqueue()];
    const worker = db.pool('worker');
    await worker.query(`select queues.record_worker_heartbeat('silent', array['db_function'], 10000)`);
    const { rows: leases } = await worker.query(
      `select task_id, task_lease_id from queues.claim_tasks('silent', 2, null, 300) order by task_id`,
    );
    expect(leases.map((l) => l.task_id)).toEqual(ids);
    // The first ran past a heartbeat (marked started); the second waited in the local queue.
    await worker.query('select queues.mark_started($1::bigint[], $2::bigint[])', [
      [leases[0].task_id],
      [leases[0].task_lease_id],
    ]);
    const { rows: revoked } = await db.query(
      `select task_id from queues.recover_stale_leases_at(now() + interval '91 seconds', 10) order by task_id`,
    );
    expect(revoked.map((r) => r.task_id)).toEqual(ids);
    const counted = async () =>
      (
        await db.query(
          `select task_id, lease_count - released_count - failed_attempts - uncounted_count as counted
             from queues.task_pending where task_id = any($1::bigint[]) order by task_id`,
          [ids],
        )
      ).rows.map((r) => [r.task_id, r.counted]);
    expect(await counted()).toEqual([
      [ids[0], 1],
      [ids[1], 0],
    ]);
    const before = (
      await db.query('select * from queues.task_pending where task_id = any($1::bigint[]) order by task_id', [ids])
    ).rows;
    await db.query('select queues.rebuild_task_pending()');
    expect(
      (await db.query('select * from queues.task_pending where task_id = any($1::bigint[]) order by task_id', [ids]))
        .rows,
    ).toEqual(before);
  });

  it('admin.recover_stale_leases does not revoke a worker that heartbeats within its own interval', async () => {
    const id = await enqueue();
    const worker = db.pool('worker');
    await worker.query(`select queues.record_worker_heartbeat('slow-beat', array['db_function'], 60000)`);
    const {
      rows: [lease],
    } = await worker.query(`select task_lease_id from queues.claim_tasks('slow-beat', 1, null, 300)`);
    await db.query(
      `update queues.worker set last_seen_at = now() - interval '20 seconds' where worker_id = 'slow-beat'`,
    );
    const { rows } = await db.pool('owner').query(`select * from admin.recover_stale_leases(10)`);
    expect(rows).toEqual([]);
    expect(
      (await db.query('select queues.is_current_lease($1, $2) as held', [id, lease.task_lease_id])).rows[0].held,
    ).toBe(true);
  });
});

describe('bounded inputs', () => {
  it.each(['infinity', '-infinity'])('enqueue refuses scheduled_at %s, writes nothing', async (when) => {
    const before = await count('select count(*)::int as n from queues.task');
    await expect(
      db.pool('app').query(`select queues.enqueue('product_resync', '{}', $1::timestamptz)`, [when]),
    ).rejects.toMatchObject({ code: '22023', message: expect.stringContaining('scheduled_at') });
    await expect(
      db
        .pool('app')
        .query('select * from queues.enqueue_many($1::jsonb)', [
          JSON.stringify([{ task_type: 'product_resync', payload: {}, scheduled_at: when }]),
        ]),
    ).rejects.toMatchObject({ code: '22023', message: expect.stringContaining('tasks[0]: scheduled_at') });
    expect(await count('select count(*)::int as n from queues.task')).toBe(before);
  });

  it('enqueue refuses JSON nested deeper than the limit, writes nothing', async () => {
    const before = await count('select count(*)::int as n from queues.task');
    const deep = '{"a":'.repeat(5000) + '1' + '}'.repeat(5000);
    await expect(
      db.pool('app').query(`select queues.enqueue('product_resync', $1::jsonb)`, [deep]),
    ).rejects.toMatchObject({
      code: '54000',
      message: expect.stringContaining('nested deeper than'),
    });
    const deepArray = `{"a":${'['.repeat(200)}1${']'.repeat(200)}}`;
    await expect(
      db
        .pool('app')
        .query('select * from queues.enqueue_many($1::jsonb)', [
          `[{"task_type": "product_resync", "payload": ${deepArray}}]`,
        ]),
    ).rejects.toMatchObject({
      code: '54000',
      message: expect.stringContaining('tasks[0]: payload is nested deeper than'),
    });
    expect(await count('select count(*)::int as n from queues.task')).toBe(before);
    // Nesting within the limit is fine.
    const ok = '{"a":'.repeat(30) + '1' + '}'.repeat(30);
    await expect(
      db.pool('app').query(`select queues.enqueue('product_resync', $1::jsonb)`, [ok]),
    ).resolves.toBeTruthy();
  });

  it('record_worker_heartbeat refuses a task-type list over the limit', async () => {
    const types = Array.from({ length: 100_000 }, (_, i) => `t${i}`);
    await expect(
      db.pool('worker').query(`select queues.record_worker_heartbeat('many', $1::text[], 30000)`, [types]),
    ).rejects.toMatchObject({ code: '54000' });
    await expect(
      db.pool('worker').query(`select queues.record_worker_heartbeat('long', array[repeat('x', 1000)], 30000)`),
    ).rejects.toMatchObject({ code: '22023' });
    expect(await count(`select count(*)::int as n from queues.worker where worker_id in ('many', 'long')`)).toBe(0);
  });
});

describe('server-side steps (queues.run_steps)', () => {
  beforeAll(async () => {
    const worker = db.dbUsers.worker;
    await db.query(`
      create schema fixture_steps;
      create table fixture_steps.effect (task_key text not null);
      -- Counts runs whether or not they commit (a sequence is not rolled back).
      create sequence fixture_steps.runs;
      -- A step with an effect; the payload says what else it does and what it returns.
      create function fixture_steps.step(payload jsonb) returns jsonb
        language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
      begin
        perform nextval('fixture_steps.runs');
        insert into fixture_steps.effect (task_key) values (payload->>'key');
        if payload ? 'wait' then
          -- Waits for the test (an advisory lock it holds).
          perform pg_advisory_xact_lock_shared((payload->>'wait')::bigint);
        end if;
        if payload ? 'complete' then
          -- Task code that completes another task, without its lease.
          perform queues.complete_task((payload->>'complete')::bigint, null, 'cancelled');
        end if;
        if payload ? 'code' then
          raise exception '%', payload->>'message' using errcode = payload->>'code';
        end if;
        return coalesce(payload->'result', '{"success": true}');
      end $$;
      revoke execute on all functions in schema fixture_steps from public;
      grant usage on schema fixture_steps to ${worker};
      grant execute on all functions in schema fixture_steps to ${worker};
      grant usage on sequence fixture_steps.runs to ${worker};
      select internal.register_runnable_function('fixture_steps.step(jsonb)');
    `);
  });

  async function enqueueStep(payload: Record<string, unknown>, maxAttempts: number | null = 1): Promise<string> {
    const { rows } = await db
      .pool('owner')
      .query(`select queues.enqueue('db_function', $1::jsonb, null, null, null, $2) as id`, [
        JSON.stringify({ db_function: 'fixture_steps.step', ...payload }),
        maxAttempts,
      ]);
    return rows[0].id;
  }

  /** Claims the given tasks (every pending one) and runs them in one call, as the worker. */
  async function runSteps(ids: string[], functionName = 'fixture_steps.step', names?: string[]) {
    const leases = (await claimAt(0, 'steps', ids.length)).sort((a, b) => Number(a.task_id) - Number(b.task_id));
    expect(leases.map((l) => l.task_id)).toEqual(ids);
    const payloads = await db.query(
      'select payload from queues.task where task_id = any($1::bigint[]) order by task_id',
      [ids],
    );
    const { rows } = await db
      .pool('worker')
      .query('select task_id, result, outcome, error, note from queues.run_steps($1, $2, $3, $4)', [
        ids,
        leases.map((l) => l.task_lease_id),
        names ?? ids.map(() => functionName),
        payloads.rows.map((r) => r.payload),
      ]);
    return rows;
  }

  const runs = async () =>
    (await db.query('select last_value::int as n, is_called from fixture_steps.runs')).rows.map((r) =>
      r.is_called ? r.n : 0,
    )[0] as number;
  const effectsOf = async (key: string) =>
    count('select count(*)::int as n from fixture_steps.effect where task_key = $1', [key]);

  it('well-formed envelopes: each step runs once, its effects commit with its completion, results and errors per task', async () => {
    const ids = [
      await enqueueStep({ key: 'ok' }),
      await enqueueStep({ key: 'status', result: { status: 'max_attempts_reached' } }),
      await enqueueStep(
        { key: 'invalid', result: { success: false, validation_failure_message: 'no such account' } },
        3,
      ),
      await enqueueStep({ key: 'error', result: { success: false, error: 'provider down' } }, 3),
    ];
    const before = await runs();
    expect(await runSteps(ids)).toEqual([
      { task_id: ids[0], result: 'completed', outcome: 'succeeded', error: null, note: null },
      { task_id: ids[1], result: 'completed', outcome: 'succeeded', error: null, note: 'status max_attempts_reached' },
      {
        task_id: ids[2],
        // A validation failure is final, attempts left or not: an outcome of its own.
        result: 'completed',
        outcome: 'validation_failed',
        error: 'fixture_steps.step: validation failure: no such account',
        note: 'no such account',
      },
      {
        task_id: ids[3],
        result: 'retry_scheduled',
        outcome: 'failed',
        error: 'fixture_steps.step: provider down',
        note: null,
      },
    ]);
    expect(await runs()).toBe(before + 4);
    for (const key of ['ok', 'status', 'invalid', 'error']) expect(await effectsOf(key)).toBe(1);
    const { rows: results } = await db.query(
      'select task_id, result from queues.task_result where task_id = any($1::bigint[]) order by task_id',
      [ids],
    );
    expect(results.map((r) => r.result)).toEqual([
      { success: true },
      { status: 'max_attempts_reached' },
      { success: false, validation_failure_message: 'no such account' },
      { success: false, error: 'provider down' },
    ]);
    const { rows: errors } = await db.query(
      'select task_id, error_message from queues.error where task_id = any($1::bigint[]) order by task_id',
      [ids],
    );
    expect(errors).toEqual([
      { task_id: ids[2], error_message: 'fixture_steps.step: validation failure: no such account' },
      { task_id: ids[3], error_message: 'fixture_steps.step: provider down' },
    ]);
  });

  it('a step that raises, a malformed envelope, a deadlock: each rolls back only its own step; the others commit once', async () => {
    const ids = [
      await enqueueStep({ key: 'before' }),
      await enqueueStep({ key: 'raises', code: 'P0001', message: 'disk on fire' }),
      await enqueueStep({ key: 'malformed', result: { done: true } }),
      await enqueueStep({ key: 'deadlock', code: '40P01', message: 'deadlock detected' }),
      await enqueueStep({ key: 'after' }),
    ];
    const before = await runs();
    expect(await runSteps(ids)).toEqual([
      { task_id: ids[0], result: 'completed', outcome: 'succeeded', error: null, note: null },
      {
        task_id: ids[1],
        result: 'completed',
        outcome: 'failed',
        error: 'fixture_steps.step raised: disk on fire',
        note: null,
      },
      {
        task_id: ids[2],
        result: 'completed',
        outcome: 'failed',
        error: 'fixture_steps.step: malformed result envelope: needs "status" or "success"',
        note: null,
      },
      // Rolled back, nothing recorded: the worker interrupts the run and it runs again.
      { task_id: ids[3], result: 'transient', outcome: null, error: 'deadlock detected', note: null },
      { task_id: ids[4], result: 'completed', outcome: 'succeeded', error: null, note: null },
    ]);
    // Each step ran once; the effects of each committed once, and only those of the steps
    // that succeeded.
    expect(await runs()).toBe(before + 5);
    expect(await effectsOf('before')).toBe(1);
    expect(await effectsOf('after')).toBe(1);
    for (const key of ['raises', 'malformed', 'deadlock']) expect(await effectsOf(key)).toBe(0);
    expect(await count(UNFINISHED, [ids[3]])).toBe(1);
    expect(
      await count('select count(*)::int as n from queues.task_result where task_id = any($1::bigint[])', [ids]),
    ).toBe(2);
  });

  it('a lease lost before the call is not run; one lost during the call is not completed and its effects roll back', async () => {
    const taken = await enqueueStep({ key: 'taken' });
    const completer = await enqueueStep({ key: 'completer' });
    const victim = await enqueueStep({ key: 'victim' });
    const ids = [taken, completer, victim];
    const leases = (await claimAt(0, 'steps', 3)).sort((a, b) => Number(a.task_id) - Number(b.task_id));
    // Taken over before the call: completed by someone else.
    await db.query(`select queues.complete_task($1, null, 'cancelled')`, [taken]);
    const { rows } = await db
      .pool('worker')
      .query('select task_id, result, outcome from queues.run_steps($1, $2, $3, $4)', [
        ids,
        leases.map((l) => l.task_lease_id),
        ids.map(() => 'fixture_steps.step'),
        // The last step is completed by the one before it (task code, in the same transaction).
        [{ key: 'taken' }, { key: 'completer', complete: Number(victim) }, { key: 'victim' }],
      ]);
    expect(rows).toEqual([
      { task_id: taken, result: 'lease_lost', outcome: null },
      { task_id: completer, result: 'completed', outcome: 'succeeded' },
      { task_id: victim, result: 'lease_lost', outcome: null },
    ]);
    expect(await effectsOf('taken')).toBe(0);
    expect(await effectsOf('completer')).toBe(1);
    expect(await effectsOf('victim')).toBe(0);
    const { rows: outcomes } = await db.query(
      'select task_id, outcome from queues.task_end where task_id = any($1::bigint[]) order by task_id',
      [ids],
    );
    expect(outcomes.map((r) => r.outcome)).toEqual(['cancelled', 'succeeded', 'cancelled']);
  });

  it('a step that raises runs once: a raise rolls back its own step, not the others, and runs nothing again', async () => {
    const ids = [
      await enqueueStep({ key: 'once-a' }),
      await enqueueStep({ key: 'once-raises', code: '55000', message: 'object not in prerequisite state' }),
      await enqueueStep({ key: 'once-b' }),
    ];
    const before = await runs();
    expect((await runSteps(ids)).map((r) => [r.result, r.outcome, r.error])).toEqual([
      ['completed', 'succeeded', null],
      ['completed', 'failed', 'fixture_steps.step raised: object not in prerequisite state'],
      ['completed', 'succeeded', null],
    ]);
    expect(await runs()).toBe(before + 3);
    expect(await effectsOf('once-a')).toBe(1);
    expect(await effectsOf('once-raises')).toBe(0);
    expect(await effectsOf('once-b')).toBe(1);
  });

  it('three steps and one that completes the task of a step before it: four bodies run, each once', async () => {
    const ids = [
      await enqueueStep({ key: 'meddled' }),
      await enqueueStep({ key: 'good-2' }),
      await enqueueStep({ key: 'good-3' }),
    ];
    ids.push(await enqueueStep({ key: 'meddler', complete: Number(ids[0]) }));
    const before = await runs();
    const rows = await runSteps(ids);
    expect(await runs()).toBe(before + 4);
    expect(rows.map((r) => [r.result, r.outcome])).toEqual([
      ['completed', 'succeeded'],
      ['completed', 'succeeded'],
      ['completed', 'succeeded'],
      // Rolled back and answered transient: it runs again under a new lease, when the task
      // it completes is complete.
      ['transient', null],
    ]);
    expect(rows[3].error).toMatch(/changed the task of a step that ran before it/);
    for (const key of ['meddled', 'good-2', 'good-3']) expect(await effectsOf(key)).toBe(1);
    expect(await effectsOf('meddler')).toBe(0);
    const { rows: outcomes } = await db.query(
      'select task_id, outcome from queues.task_end where task_id = any($1::bigint[]) order by task_id',
      [ids],
    );
    // The first step completed under its own lease, with its writes; not cancelled.
    expect(outcomes.map((r) => r.outcome)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    expect(await count(UNFINISHED, [ids[3]])).toBe(1);
  });

  it('a step that completes its own task is rolled back and fails, once', async () => {
    const id = await enqueueStep({ key: 'self' });
    const before = await runs();
    const [lease] = await claimAt(0, 'steps', 1);
    expect(lease.task_id).toBe(id);
    const { rows } = await db
      .pool('worker')
      .query('select task_id, result, outcome, error from queues.run_steps($1, $2, $3, $4)', [
        [id],
        [lease.task_lease_id],
        ['fixture_steps.step'],
        [{ key: 'self', complete: Number(id) }],
      ]);
    expect(await runs()).toBe(before + 1);
    expect(rows.map((r) => [r.result, r.outcome])).toEqual([['completed', 'failed']]);
    expect(rows[0].error).toMatch(/changed its own task/);
    expect(await effectsOf('self')).toBe(0);
  });

  it('a lease taken by another transaction during the call: that step refused, the others rolled back once, none run twice', async () => {
    const ids = [
      await enqueueStep({ key: 'taken-mid-call' }),
      await enqueueStep({ key: 'waits', wait: 7001 }),
      await enqueueStep({ key: 'after-wait' }),
    ];
    const leases = (await claimAt(0, 'steps', 3)).sort((a, b) => Number(a.task_id) - Number(b.task_id));
    expect(leases.map((l) => l.task_id)).toEqual(ids);
    const payloads = await db.query(
      'select payload from queues.task where task_id = any($1::bigint[]) order by task_id',
      [ids],
    );
    const gate = await db.client('owner');
    await gate.query('select pg_advisory_lock(7001)');
    const runner = await db.client('worker');
    const pid = Number((await runner.query('select pg_backend_pid() as pid')).rows[0].pid);
    const before = await runs();
    const call = runner.query('select task_id, result, outcome, error from queues.run_steps($1, $2, $3, $4)', [
      ids,
      leases.map((l) => l.task_lease_id),
      ids.map(() => 'fixture_steps.step'),
      payloads.rows.map((r) => r.payload),
    ]);
    for (let i = 0; ; i++) {
      const { rows } = await db.query('select cardinality(pg_blocking_pids($1)) > 0 as waits', [pid]);
      if (rows[0].waits) break;
      if (i > 2000) throw new Error('the call never reached the waiting step');
      await new Promise((r) => setTimeout(r, 5));
    }
    // The first step ran; its lease is given back meanwhile (a release, as at shutdown).
    await db.query('select * from queues.release_leases($1::bigint[], $2::bigint[])', [
      [ids[0]],
      [leases[0].task_lease_id],
    ]);
    await gate.query('select pg_advisory_unlock(7001)');
    const { rows } = await call;
    expect(rows.map((r) => [r.task_id, r.result, r.outcome])).toEqual([
      [ids[0], 'lease_lost', null],
      [ids[1], 'transient', null],
      [ids[2], 'transient', null],
    ]);
    expect(rows[1].error).toMatch(/refused/);
    expect(await runs()).toBe(before + 3);
    for (const key of ['taken-mid-call', 'waits', 'after-wait']) expect(await effectsOf(key)).toBe(0);
    expect(await count('select count(*)::int as n from queues.task_end where task_id = any($1::bigint[])', [ids])).toBe(
      0,
    );
    await runner.end();
    await gate.end();
  });

  it('a function that cannot run fails its own steps only', async () => {
    const ids = [await enqueue(), await enqueue(), await enqueue()];
    const rows = await runSteps(ids, undefined, ['internal.noop', 'fixture_steps.nope', 'internal.noop']);
    expect(rows.map((r) => [r.result, r.outcome, r.error])).toEqual([
      ['completed', 'succeeded', null],
      ['completed', 'failed', 'fixture_steps.nope raised: function fixture_steps.nope(jsonb) does not exist'],
      ['completed', 'succeeded', null],
    ]);
  });

  it('bad input is refused with a clear error and writes nothing', async () => {
    const id = await enqueue();
    const [lease] = await claimAt(0, 'steps', 1);
    const before = await count('select count(*)::int as n from queues.task_end');
    const call = (ids: unknown, leases: unknown, names: unknown, payloads: unknown) =>
      db.pool('worker').query('select * from queues.run_steps($1, $2, $3, $4)', [ids, leases, names, payloads]);
    await expect(call(null, [lease.task_lease_id], ['internal.noop'], [{}])).rejects.toMatchObject({
      code: '22004',
      message: expect.stringContaining('must not be null'),
    });
    await expect(call([id], [lease.task_lease_id], ['internal.noop', 'internal.noop'], [{}])).rejects.toMatchObject({
      code: '22023',
      message: expect.stringContaining('one element per task'),
    });
    await expect(
      call([id, null], [lease.task_lease_id, 1], ['internal.noop', 'internal.noop'], [{}, {}]),
    ).rejects.toMatchObject({
      code: '22004',
      message: expect.stringContaining('must not contain null'),
    });
    await expect(
      call([id, id], [lease.task_lease_id, lease.task_lease_id], ['internal.noop', 'internal.noop'], [{}, {}]),
    ).rejects.toMatchObject({ code: '22023', message: 'task_ids must not repeat a task' });
    const many = Array.from({ length: 1001 }, (_, i) => i + 1);
    await expect(
      call(
        many,
        many,
        many.map(() => 'internal.noop'),
        many.map(() => ({})),
      ),
    ).rejects.toMatchObject({
      code: '54000',
    });
    await expect(
      db
        .pool('worker')
        .query(`select * from queues.complete_steps($1, $2, '{succeeded}', null, '{}', '{}', '{"[1]"}')`, [
          [id],
          [lease.task_lease_id],
        ]),
    ).rejects.toMatchObject({ code: '22023', message: 'results must be JSON objects' });
    await expect(
      db
        .pool('worker')
        .query(`select * from queues.complete_steps($1, '{null}', '{succeeded}', null, '{}', '{}', '{null}')`, [[id]]),
    ).rejects.toMatchObject({
      code: '22004',
      message: expect.stringContaining('task_lease_ids must not contain null'),
    });
    expect(await count('select count(*)::int as n from queues.task_end')).toBe(before);
    expect(await count(UNFINISHED, [id])).toBe(1);
  });
});
