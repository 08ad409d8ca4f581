// Every processor's success and failure paths, both envelope shapes, malformed envelopes,
// handlers that throw or return non-objects, and exactly-once db_function steps.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type pg from 'pg';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { claimTasks, connect, type ClaimedTask } from '@org/queue-client';
import type { Provider } from '@org/contracts';
import {
  Completer,
  createLogger,
  dbFunctionProcessor,
  channelTaskProcessor,
  LeaseLostError,
  type Processor,
  type TaskReport,
} from '../src/index.js';
import { effects, enqueue, eventually, factsOf, handlerCalls, installFixtures } from './support/fixtures.js';

let db: TestDatabase;
let pool: pg.Pool;
let completer: Completer;
const log = createLogger('silent');

beforeAll(async () => {
  db = await createTestDatabase();
  await installFixtures(db);
  pool = connect({ connectionString: db.url('worker') });
  completer = new Completer(db.url('worker'), log);
});
afterAll(async () => {
  await completer?.close();
  await pool?.end();
  await db?.drop();
});

async function claimOne(taskType: string): Promise<ClaimedTask> {
  const [task] = await claimTasks(pool, { workerId: 'processor-test', limit: 1, taskTypes: [taskType] });
  if (!task) throw new Error(`no ${taskType} task to claim`);
  return task;
}

/** Claims the test_channel tasks due and returns task `id`'s lease (the others stay leased). */
async function claimById(id: string): Promise<ClaimedTask> {
  const tasks = await claimTasks(pool, { workerId: 'processor-test', limit: 100, taskTypes: ['test_channel'] });
  const task = tasks.find((t) => t.taskId === id);
  if (!task) throw new Error(`task ${id} was not claimed`);
  return task;
}

/** Runs the processor as the worker does: processor, then its outcome and start recorded by the completer. */
async function process(processor: Processor, task: ClaimedTask): Promise<TaskReport> {
  const startedAt = Date.now();
  const outcome = await processor.process({
    task,
    pool,
    log,
    signal: new AbortController().signal,
    progress: () => {},
    dependencies: () => Promise.resolve([]),
  });
  const { result, report } = await completer.complete(task, outcome, startedAt);
  if (result === 'lease_lost') throw new LeaseLostError(task);
  return report;
}

async function run(processor: Processor, taskType: string, payload: Record<string, unknown>) {
  const id = await enqueue(db, taskType, payload);
  const task = await claimOne(taskType);
  expect(task.taskId).toBe(id);
  const report = await process(processor, task);
  return { id, report, facts: await factsOf(db, id) };
}

describe('db_function processor', () => {
  const processor = dbFunctionProcessor();
  const step = (key: string, extra: Record<string, unknown> = {}) => ({ db_function: 'fixture.step', key, ...extra });

  it('success ({success: true}): effect committed with the completion', async () => {
    const { id, report, facts } = await run(processor, 'db_function', step('ok'));
    expect(report).toEqual({ outcome: 'succeeded' });
    // The envelope is kept as the run's result (queues.run_steps records it before the completion).
    expect((await db.query('select result from queues.task_result where task_id = $1', [id])).rows).toEqual([
      { result: { success: true } },
    ]);
    expect(facts).toEqual({ outcome: 'succeeded', errors: [], leases: 1 });
    expect(await effects(db, 'ok')).toBe(1);
  });

  it('success ({status: "succeeded"}), the other envelope shape', async () => {
    const { facts } = await run(
      processor,
      'db_function',
      step('status-ok', { result: { status: 'succeeded', payload: { x: 1 } } }),
    );
    expect(facts).toEqual({ outcome: 'succeeded', errors: [], leases: 1 });
  });

  it('a descriptive non-success status is logged, not fatal', async () => {
    const { id, report, facts } = await run(
      processor,
      'db_function',
      step('status', { result: { status: 'max_attempts_reached' } }),
    );
    expect(report).toEqual({ outcome: 'succeeded', note: 'status max_attempts_reached' });
    expect((await db.query('select result from queues.task_result where task_id = $1', [id])).rows).toEqual([
      { result: { status: 'max_attempts_reached' } },
    ]);
    expect(facts.errors).toEqual([]);
  });

  it('validation_failure_message: error row, completed validation_failed, effects kept', async () => {
    const { facts } = await run(
      processor,
      'db_function',
      step('invalid', { result: { success: false, validation_failure_message: 'no such account' } }),
    );
    expect(facts).toEqual({
      outcome: 'validation_failed',
      errors: ['fixture.step: validation failure: no such account'],
      leases: 1,
    });
    expect(await effects(db, 'invalid')).toBe(1);
  });

  it('error in the envelope: error row, completed failed', async () => {
    const { facts } = await run(
      processor,
      'db_function',
      step('err', { result: { success: false, error: 'provider down' } }),
    );
    expect(facts).toEqual({ outcome: 'failed', errors: ['fixture.step: provider down'], leases: 1 });
  });

  it('an error alone (the supervisors document: {"error": "missing_task_id"}): its error, effects kept', async () => {
    const { facts } = await run(processor, 'db_function', step('err-alone', { result: { error: 'missing_task_id' } }));
    expect(facts).toEqual({ outcome: 'failed', errors: ['fixture.step: missing_task_id'], leases: 1 });
    expect(await effects(db, 'err-alone')).toBe(1);
  });

  it('a function that raises: effects rolled back, then error row and completion', async () => {
    const { facts } = await run(processor, 'db_function', step('raises', { raise: 'disk on fire' }));
    expect(facts.outcome).toBe('failed');
    expect(facts.errors).toEqual(['fixture.step raised: step failed: disk on fire']);
    expect(await effects(db, 'raises')).toBe(0);
  });

  const malformed: [string, unknown, RegExp][] = [
    ['JSON null', null, /expected an object, got null/],
    ['an array', [1, 2], /expected an object, got an array/],
    ['a string', 'done', /expected an object, got a string/],
    ['a number', 42, /expected an object, got a number/],
    ['an empty object', {}, /needs "status" or "success"/],
    ['success as a string', { success: 'yes' }, /malformed result envelope/],
    ['status as a number', { status: 1 }, /malformed result envelope/],
    ['empty status', { status: '' }, /malformed result envelope/],
    ['success false with no reason', { success: false }, /neither error nor validation_failure_message/],
    ['both shapes at once', { status: 'succeeded', success: true }, /both "status" and "success"/],
    ['an unknown field', { success: true, extra: 1 }, /malformed result envelope/],
    ['error not a string', { success: false, error: { code: 1 } }, /malformed result envelope/],
    ['status shape with an unknown field', { status: 'ok', note: 'x' }, /malformed result envelope/],
  ];
  it.each(malformed)(
    'malformed envelope (%s): rolled back, error row, never a crash',
    async (name, result, message) => {
      const key = `malformed-${name}`;
      const { report, facts } = await run(processor, 'db_function', step(key, { result }));
      expect(report.outcome).toBe('failed');
      expect(facts.outcome).toBe('failed');
      expect(facts.errors).toHaveLength(1);
      expect(facts.errors[0]).toMatch(message);
      expect(await effects(db, key)).toBe(0);
    },
  );

  it('a function returning SQL NULL is a malformed envelope', async () => {
    const { facts } = await run(processor, 'db_function', { db_function: 'fixture.nothing' });
    expect(facts.errors[0]).toMatch(/fixture.nothing: malformed result envelope: expected an object, got null/);
  });

  it('bad db_function payloads: error row and completion, nothing run', async () => {
    for (const [payload, message] of [
      [{}, /invalid db_function payload: db_function: /],
      [{ db_function: 'Fixture.Step' }, /must be schema.function/],
      [{ db_function: 'fixture.step; drop table x' }, /must be schema.function/],
      [{ db_function: 'fixture.missing' }, /fixture.missing raised: function fixture.missing\(jsonb\) does not exist/],
      [{ db_function: 'pg_catalog.pg_sleep' }, /never runnable/],
    ] as const) {
      const { facts } = await run(processor, 'db_function', payload);
      expect(facts.outcome).toBe('failed');
      expect(facts.errors[0]).toMatch(message);
    }
  });

  it('"repeat": called again while it says more, each call a transaction of its own, outside the completion', async () => {
    const { id, report, facts } = await run(processor, 'db_function', {
      db_function: 'fixture.repeat',
      repeat: true,
      key: 'repeat-3',
      times: 3,
    });
    expect(report).toEqual({ outcome: 'succeeded' });
    expect(facts).toEqual({ outcome: 'succeeded', errors: [], leases: 1 });
    // Three calls, three transactions (the effects are keyed by transaction id).
    const { rows } = await db.query(
      `select count(distinct task_key)::int as n from fixture.effect where task_key like 'repeat-3#%'`,
    );
    expect(rows).toEqual([{ n: 3 }]);
    expect((await db.query('select result from queues.task_result where task_id = $1', [id])).rows).toEqual([
      { result: { success: true, payload: { calls: 3, last: { call: 3, more: false } } } },
    ]);
  });

  it('"repeat": an error envelope ends the calls and fails the task; the calls before it stay committed', async () => {
    const { facts } = await run(processor, 'db_function', {
      db_function: 'fixture.repeat',
      repeat: true,
      key: 'repeat-fail',
      times: 5,
      fail_at: 2,
    });
    expect(facts).toEqual({ outcome: 'failed', errors: ['fixture.repeat: gave up at call 2'], leases: 1 });
    const { rows } = await db.query(
      `select count(*)::int as n from fixture.effect where task_key like 'repeat-fail#%'`,
    );
    expect(rows).toEqual([{ n: 2 }]);
    const { facts: bad } = await run(processor, 'db_function', { db_function: 'fixture.repeat', repeat: 'yes' });
    expect(bad.errors[0]).toMatch(/invalid db_function payload: repeat: /);
  });

  it('exactly once: when the lease was taken over, the step and its completion roll back together', async () => {
    const id = await enqueue(db, 'db_function', step('stolen'));
    const task = await claimOne('db_function');
    // Another worker takes the task after this lease "expires".
    await db.query(
      `select * from queues.claim_tasks_at(now() + interval '10 minutes', 'thief-db-function', 1, null, 60, 5)`,
    );
    await expect(process(processor, task)).rejects.toBeInstanceOf(LeaseLostError);
    expect(await effects(db, 'stolen')).toBe(0);
    expect(await factsOf(db, id)).toEqual({ outcome: null, errors: [], leases: 2 });
  });
});

describe('handler processor', () => {
  const calls: unknown[] = [];
  let failWith: string | undefined;
  const provider: Provider<{ to: string; idempotency_key?: string }> = {
    name: 'test-provider',
    payloadSchema: z.strictObject({ to: z.string().min(1), idempotency_key: z.string().optional() }),
    send(payload, context) {
      calls.push({ payload, taskId: context.taskId });
      if (failWith) return Promise.reject(new Error(failWith));
      return Promise.resolve({ delivered_to: payload.to, provider_id: 'p-1' });
    },
  };
  const processor = channelTaskProcessor(provider);
  const handlers = {
    before_handler: 'fixture.before',
    success_handler: 'fixture.on_success',
    error_handler: 'fixture.on_error',
  };

  beforeEach(async () => {
    calls.length = 0;
    failWith = undefined;
    await handlerCalls(db);
  });

  it('success: before -> provider -> success_handler({original_payload, worker_payload}) -> completed', async () => {
    const payload = {
      ...handlers,
      attempt_id: 7,
      before: { success: true, payload: { to: 'a@example.com', idempotency_key: '7' } },
    };
    const { id, report, facts } = await run(processor, 'test_channel', payload);
    expect(report).toEqual({ outcome: 'succeeded' });
    expect(facts).toEqual({ outcome: 'succeeded', errors: [], leases: 1 });
    expect(calls).toEqual([{ payload: { to: 'a@example.com', idempotency_key: '7' }, taskId: id }]);
    expect(await handlerCalls(db)).toEqual([
      {
        kind: 'success',
        body: { original_payload: payload, worker_payload: { delivered_to: 'a@example.com', provider_id: 'p-1' } },
      },
    ]);
  });

  it('the status envelope shape works for before handlers too', async () => {
    const payload = { ...handlers, before: { status: 'succeeded', payload: { to: 'b@example.com' } } };
    const { facts } = await run(processor, 'test_channel', payload);
    expect(facts.outcome).toBe('succeeded');
    expect(calls).toHaveLength(1);
  });

  it('provider failure: error row and error_handler({original_payload, error}), completed failed', async () => {
    failWith = 'mailbox full';
    const payload = { ...handlers, before: { success: true, payload: { to: 'c@example.com' } } };
    const { facts } = await run(processor, 'test_channel', payload);
    expect(facts).toEqual({ outcome: 'failed', errors: ['test-provider: mailbox full'], leases: 1 });
    expect(await handlerCalls(db)).toEqual([
      { kind: 'error', body: { original_payload: payload, error: 'test-provider: mailbox full' } },
    ]);
  });

  const beforeFailures: [string, Record<string, unknown>, RegExp][] = [
    [
      'validation failure',
      { before: { success: false, validation_failure_message: 'unsubscribed' } },
      /fixture.before: validation failure: unsubscribed/,
    ],
    ['error', { before: { success: false, error: 'lookup failed' } }, /fixture.before: lookup failed/],
    ['non-success status', { before: { status: 'attempt_not_found' } }, /fixture.before: status attempt_not_found/],
    ['malformed envelope', { before: { ok: true } }, /fixture.before: malformed result envelope/],
    ['non-object (a string)', { before: 'to: a@b' }, /expected an object, got a string/],
    ['non-object (JSON null)', { before: null }, /expected an object, got null/],
    ['an exception', { before_raise: true }, /fixture.before raised: before failed/],
    [
      'a payload the provider rejects',
      { before: { success: true, payload: { to: '', cc: 'x' } } },
      /invalid test_channel payload from fixture.before/,
    ],
  ];
  it.each(beforeFailures)(
    'before handler %s: error row + error_handler, no provider call',
    async (_name, extra, message) => {
      const payload = { ...handlers, ...extra };
      const { facts } = await run(processor, 'test_channel', payload);
      expect(calls).toEqual([]);
      // A validation failure is a business outcome of its own: final, not a dead letter.
      expect(facts.outcome).toBe(_name === 'validation failure' ? 'validation_failed' : 'failed');
      expect(facts.errors).toHaveLength(1);
      expect(facts.errors[0]).toMatch(message);
      const recorded = await handlerCalls(db);
      expect(recorded.map((c) => c.kind)).toEqual(['error']);
      expect(recorded[0].body.error).toMatch(message);
    },
  );

  it('a success handler that raises: the provider call stands, the error is recorded, completed failed', async () => {
    const payload = { ...handlers, success_raise: true, before: { success: true, payload: { to: 'd@example.com' } } };
    const { facts } = await run(processor, 'test_channel', payload);
    expect(calls).toHaveLength(1);
    expect(facts.outcome).toBe('failed');
    expect(facts.errors).toEqual(['test-provider succeeded but fixture.on_success raised: success handler failed']);
    expect(await handlerCalls(db)).toEqual([]); // its insert rolled back
  });

  it('a success handler returning an error envelope is recorded', async () => {
    const payload = {
      ...handlers,
      success_result: { success: false, error: 'attempt already closed' },
      before: { success: true, payload: { to: 'e@example.com' } },
    };
    const { facts } = await run(processor, 'test_channel', payload);
    expect(facts).toEqual({ outcome: 'failed', errors: ['fixture.on_success: attempt already closed'], leases: 1 });
  });

  it('an error handler that raises: both errors recorded, completed failed', async () => {
    failWith = 'timeout';
    const payload = { ...handlers, error_raise: true, before: { success: true, payload: { to: 'f@example.com' } } };
    const { facts } = await run(processor, 'test_channel', payload);
    expect(facts.outcome).toBe('failed');
    expect(facts.errors).toEqual(['test-provider: timeout', 'fixture.on_error raised: error handler failed']);
  });

  it('without a before handler the provider gets the payload minus handler names', async () => {
    const { facts } = await run(processor, 'test_channel', {
      to: 'g@example.com',
      success_handler: 'fixture.on_success',
    });
    expect(facts.outcome).toBe('succeeded');
    expect(calls).toEqual([{ payload: { to: 'g@example.com' }, taskId: expect.any(String) }]);
  });

  it('invalid handler names are an error, nothing called', async () => {
    const { facts } = await run(processor, 'test_channel', { before_handler: 'not a name', to: 'h@example.com' });
    expect(facts.outcome).toBe('failed');
    expect(facts.errors[0]).toMatch(/invalid handler names in payload: before_handler/);
    expect(calls).toEqual([]);
  });

  /**
   * Runs `tasks` through the processor and the completer, started in one turn of the event
   * loop as the executor starts a claim's tasks, on a pool that notes each statement sent.
   */
  async function startTogether(tasks: ClaimedTask[]) {
    const sent: string[] = [];
    const counting = {
      query: (...args: Parameters<pg.Pool['query']>) => {
        const config = args[0] as string | { text: string };
        sent.push(typeof config === 'string' ? config : config.text);
        return (pool.query as (...a: unknown[]) => unknown)(...args);
      },
    } as unknown as pg.Pool;
    const settled = await Promise.allSettled(
      tasks.map(async (task) => {
        const startedAt = Date.now();
        const outcome = await processor.process({
          task,
          pool: counting,
          log,
          signal: new AbortController().signal,
          progress: () => {},
          dependencies: () => Promise.resolve([]),
        });
        const { result, report } = await completer.complete(task, outcome, startedAt);
        if (result === 'lease_lost') throw new LeaseLostError(task);
        return report;
      }),
    );
    return { sent, settled };
  }

  it('tasks started together: one before statement; a raise, a lost lease and the successes each their own outcome', async () => {
    const ids = {
      ok1: await enqueue(db, 'test_channel', {
        ...handlers,
        before: { success: true, payload: { to: 'g1@example.com' } },
      }),
      raises: await enqueue(db, 'test_channel', { ...handlers, before_raise: true }),
      lost: await enqueue(db, 'test_channel', {
        ...handlers,
        before: { success: true, payload: { to: 'g3@example.com' } },
      }),
      ok2: await enqueue(db, 'test_channel', {
        ...handlers,
        before: { success: true, payload: { to: 'g4@example.com' } },
      }),
    };
    const tasks = await claimTasks(pool, { workerId: 'processor-test', limit: 4, taskTypes: ['test_channel'] });
    expect(tasks.map((t) => t.taskId).sort()).toEqual(Object.values(ids).sort());
    const lost = tasks.find((t) => t.taskId === ids.lost)!;
    await db.query(`select * from queues.release_leases(array[$1]::bigint[], array[$2]::bigint[])`, [
      lost.taskId,
      lost.taskLeaseId,
    ]);
    const { sent, settled } = await startTogether(tasks);
    expect(sent.filter((text) => text.includes('run_before_provider_calls'))).toHaveLength(1);
    expect(sent).toHaveLength(1);
    const byId = new Map(tasks.map((t, i) => [t.taskId, settled[i]]));
    expect(byId.get(ids.ok1)).toEqual({ status: 'fulfilled', value: { outcome: 'succeeded' } });
    expect(byId.get(ids.ok2)).toEqual({ status: 'fulfilled', value: { outcome: 'succeeded' } });
    expect(byId.get(ids.raises)).toMatchObject({ status: 'fulfilled', value: { outcome: 'failed' } });
    expect(byId.get(ids.lost)).toMatchObject({ status: 'rejected', reason: expect.any(LeaseLostError) });
    // The provider was called for the two successes only.
    expect(calls.map((c) => (c as { taskId: string }).taskId).sort()).toEqual([ids.ok1, ids.ok2].sort());
    expect(await factsOf(db, ids.ok1)).toEqual({ outcome: 'succeeded', errors: [], leases: 1 });
    expect(await factsOf(db, ids.ok2)).toEqual({ outcome: 'succeeded', errors: [], leases: 1 });
    const raised = await factsOf(db, ids.raises);
    expect(raised.outcome).toBe('failed');
    expect(raised.errors).toEqual(['fixture.before raised: before failed']);
    // The task whose lease was lost records nothing of this run.
    expect((await factsOf(db, ids.lost)).outcome).toBeNull();
    expect((await handlerCalls(db)).map((c) => c.kind).sort()).toEqual(['error', 'success', 'success']);
    // The released task runs again under a lease of its own (and leaves no task due behind).
    expect(await process(processor, await claimById(ids.lost))).toEqual({ outcome: 'succeeded' });
  });

  it('a before statement cut short as a whole (a statement timeout, a cancel) fails only the call at fault', async () => {
    // A statement timeout or a cancel (57014) is not caught by a call's subtransaction: the
    // group's statement fails as a whole and nothing of it commits. Each call then runs
    // again in a statement of its own.
    await db.query(`
      create or replace function fixture.before_cancelled(payload jsonb) returns jsonb
        language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
      begin
        insert into fixture.handler_call (kind, body) values ('before_cancelled', payload);
        raise exception 'canceling statement due to statement timeout' using errcode = 'query_canceled';
      end $$;
      revoke execute on function fixture.before_cancelled(jsonb) from public;
      grant execute on function fixture.before_cancelled(jsonb) to ${db.dbUsers.worker};
      select internal.register_runnable_function('fixture.before_cancelled(jsonb)');
    `);
    const ids = {
      ok1: await enqueue(db, 'test_channel', {
        ...handlers,
        before: { success: true, payload: { to: 'c1@example.com' } },
      }),
      cut: await enqueue(db, 'test_channel', { ...handlers, before_handler: 'fixture.before_cancelled' }),
      ok2: await enqueue(db, 'test_channel', {
        ...handlers,
        before: { success: true, payload: { to: 'c3@example.com' } },
      }),
    };
    const tasks = await claimTasks(pool, { workerId: 'processor-test', limit: 3, taskTypes: ['test_channel'] });
    expect(tasks.map((t) => t.taskId).sort()).toEqual(Object.values(ids).sort());
    const { sent, settled } = await startTogether(tasks);
    // One group statement, then each call alone.
    expect(sent.filter((text) => text.includes('run_before_provider_calls'))).toHaveLength(4);
    const byId = new Map(tasks.map((t, i) => [t.taskId, settled[i]]));
    expect(byId.get(ids.ok1)).toEqual({ status: 'fulfilled', value: { outcome: 'succeeded' } });
    expect(byId.get(ids.ok2)).toEqual({ status: 'fulfilled', value: { outcome: 'succeeded' } });
    expect(byId.get(ids.cut)).toMatchObject({ status: 'fulfilled', value: { outcome: 'failed' } });
    expect(calls.map((c) => (c as { taskId: string }).taskId).sort()).toEqual([ids.ok1, ids.ok2].sort());
    expect((await factsOf(db, ids.cut)).errors[0]).toMatch(/canceling statement due to statement timeout/);
    // The call at fault kept nothing of its before handler (rolled back, twice); its error
    // handler ran, as for a before handler that raises.
    expect((await handlerCalls(db)).map((c) => c.kind).sort()).toEqual(['error', 'success', 'success']);
  });

  it('a before handler waiting for a lock does not hold back the before handlers started after it', async () => {
    await db.query(`
      create or replace function fixture.before_waits(payload jsonb) returns jsonb
        language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
      begin
        perform pg_advisory_xact_lock(424242);
        return payload->'before';
      end $$;
      revoke execute on function fixture.before_waits(jsonb) from public;
      grant execute on function fixture.before_waits(jsonb) to ${db.dbUsers.worker};
      select internal.register_runnable_function('fixture.before_waits(jsonb)');
    `);
    const waits = await enqueue(db, 'test_channel', {
      ...handlers,
      before_handler: 'fixture.before_waits',
      before: { success: true, payload: { to: 'w1@example.com' } },
    });
    const holder = await db.pool('owner').connect();
    try {
      await holder.query('begin');
      await holder.query('select pg_advisory_xact_lock(424242)');
      const waiting = process(processor, await claimById(waits));
      // Its statement is blocked on the lock; the next task's before handler goes on its own.
      await eventually(async () => {
        const { rows } = await db.query(
          `select 1 from pg_locks where locktype = 'advisory' and objid = 424242 and not granted`,
        );
        return rows.length === 1;
      }, 'the first before statement waits for the lock');
      const next = await enqueue(db, 'test_channel', {
        ...handlers,
        before: { success: true, payload: { to: 'w2@example.com' } },
      });
      expect(await process(processor, await claimById(next))).toEqual({ outcome: 'succeeded' });
      expect((await factsOf(db, next)).outcome).toBe('succeeded');
      expect((await factsOf(db, waits)).outcome).toBeNull();
      await holder.query('commit');
      expect(await waiting).toEqual({ outcome: 'succeeded' });
      expect((await factsOf(db, waits)).outcome).toBe('succeeded');
    } finally {
      await holder.query('rollback').catch(() => {});
      holder.release();
    }
  });

  it('the handler, the error row and the completion are fenced by the lease', async () => {
    const id = await enqueue(db, 'test_channel', {
      ...handlers,
      before: { success: true, payload: { to: 'i@example.com' } },
    });
    const task = await claimOne('test_channel');
    await db.query(
      `select * from queues.claim_tasks_at(now() + interval '10 minutes', 'thief-channel', 1, array['test_channel'], 60, 5)`,
    );
    await expect(process(processor, task)).rejects.toBeInstanceOf(LeaseLostError);
    expect(await handlerCalls(db)).toEqual([]);
    expect((await factsOf(db, id)).outcome).toBeNull();
  });
});
