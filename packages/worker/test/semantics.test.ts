// The real Worker against a real PostgreSQL where task code and the queue's answers
// meet: task errors that look like lease loss, completions made by someone else, a
// second lease of a task the worker is still running, transient errors that never end,
// validation failures with attempts left, unprintable error messages, steps blocked on
// a lock.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import type { Provider } from '@org/contracts';
import { QueueError } from '@org/queue-client';
import {
  classifyError,
  createLogger,
  dbFunctionProcessor,
  channelTaskProcessor,
  ProcessorRegistry,
  Worker,
  type WorkerOptions,
} from '../src/index.js';
import { effects, eventually, factsOf, handlerCalls, installFixtures, stepsRunning } from './support/fixtures.js';

let db: TestDatabase;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  await installFixtures(db);
  const worker = db.dbUsers.worker;
  await db.query(`
    create schema fixture_sem;
    create sequence fixture_sem.success_tries;
    -- Task code that raises whatever SQLSTATE and message the payload names (directly,
    -- or from a success handler's original payload).
    create function fixture_sem.raise(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    declare
      _code text := coalesce(payload->>'code', payload->'original_payload'->>'success_code');
    begin
      raise exception '%', coalesce(payload->>'message', payload->'original_payload'->>'success_message', 'raised')
        using errcode = _code;
    end $$;
    -- A step that updates a fact table: the append-only trigger raises 55000.
    create function fixture_sem.touch_fact(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    begin
      update queues.task set priority = priority where task_id = -1;
      return '{"success": true}';
    end $$;
    -- A step that records the transaction it ran in.
    create table fixture_sem.step_xact (task_key text not null, xact bigint not null);
    create function fixture_sem.record_xact(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    begin
      insert into fixture_sem.step_xact values (payload->>'key', txid_current());
      return '{"success": true}';
    end $$;
    -- A step that holds a row for a while and never waits for it (NOWAIT raises 55P03):
    -- the runs of one process supervisor lock their root the same way.
    create table fixture_sem.root (id integer primary key);
    insert into fixture_sem.root values (1);
    create function fixture_sem.hold_root(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    begin
      perform 1 from fixture_sem.root where id = 1 for update nowait;
      insert into fixture_sem.step_xact values ('hold_root', txid_current());
      perform pg_sleep(0.2);
      return '{"success": true}';
    end $$;
    -- A success handler whose first call fails with a serialization failure (40001).
    create function fixture_sem.flaky_success(payload jsonb) returns jsonb
      language plpgsql volatile security definer set search_path = pg_catalog, pg_temp as $$
    begin
      if nextval('fixture_sem.success_tries') = 1 then
        raise exception 'could not serialize access' using errcode = '40001';
      end if;
      insert into fixture.handler_call values ('success', payload);
      return '{"success": true}';
    end $$;
    revoke execute on all functions in schema fixture_sem from public;
    grant usage on schema fixture_sem to ${worker};
    grant execute on all functions in schema fixture_sem to ${worker};
    grant usage, select on sequence fixture_sem.success_tries to ${worker};
    select internal.register_runnable_function(f::regprocedure)
      from unnest(array['fixture_sem.raise(jsonb)', 'fixture_sem.touch_fact(jsonb)', 'fixture_sem.flaky_success(jsonb)',
                        'fixture_sem.record_xact(jsonb)', 'fixture_sem.hold_root(jsonb)']) f;
    -- Supervisor and retry backoffs in milliseconds rather than seconds.
    insert into internal.setting (name, value) values ('backoff_scale', '0.001')
      on conflict (name) do update set value = excluded.value;
  `);
});
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop(0)));
});
afterAll(async () => {
  await db?.drop();
});

/** Enqueued by the owner, as the database's own processes do: db_function and channel tasks are worker-only. */
async function enqueue(taskType: string, payload: unknown, maxAttempts: number | null = 1): Promise<string> {
  const { rows } = await db
    .pool('owner')
    .query('select queues.enqueue($1, $2::jsonb, null, null, null, $3) as id', [
      taskType,
      JSON.stringify(payload),
      maxAttempts,
    ]);
  return rows[0].id;
}

/** A provider that records each call and, while `gate` is closed, waits for it. */
function recordingProvider(options: { fail?: string } = {}) {
  const calls: { to: string; key: string | undefined; taskId: string }[] = [];
  let running = 0;
  let maxRunning = 0;
  let open!: () => void;
  let gate: Promise<void> | undefined;
  const provider: Provider<{ to: string; idempotency_key?: string }> = {
    name: 'recording',
    payloadSchema: z.strictObject({ to: z.string(), idempotency_key: z.string().optional() }),
    async send(payload, context) {
      calls.push({ to: payload.to, key: payload.idempotency_key, taskId: context.taskId });
      running++;
      maxRunning = Math.max(maxRunning, running);
      try {
        if (gate) await gate;
        if (options.fail) throw new Error(options.fail);
        return { ok: true };
      } finally {
        running--;
      }
    },
  };
  return {
    provider,
    calls,
    maxRunning: () => maxRunning,
    close: () => {
      gate = new Promise((resolve) => (open = resolve));
    },
    open: () => open(),
  };
}

async function startWorker(registry: ProcessorRegistry, overrides: Partial<WorkerOptions> = {}): Promise<Worker> {
  const worker = new Worker({
    databaseUrl: db.url('worker'),
    roles: null,
    workerId: `sem-${Math.random().toString(36).slice(2, 8)}`,
    concurrency: 4,
    pollIntervalMs: 100,
    heartbeatIntervalMs: 500,
    leaseSeconds: 2,
    maxLeases: 3,
    shutdownGraceMs: 500,
    logger: createLogger('silent'),
    registry,
    ...overrides,
  });
  workers.push(worker);
  await worker.start();
  return worker;
}

const completed = (id: string) => async () => (await factsOf(db, id)).outcome !== null;

/**
 * A channel task whose success handler raises `code` with `message` after the provider
 * call: one provider call, and the task failed once with that message.
 */
async function expectSuccessHandlerFailure(code: string, message: string, recorded: RegExp): Promise<void> {
  const rec = recordingProvider();
  await startWorker(new ProcessorRegistry().register('test_channel', channelTaskProcessor(rec.provider)));
  const id = await enqueue('test_channel', {
    before_handler: 'fixture.before',
    before: { success: true, payload: { to: `sms-${code}` } },
    success_handler: 'fixture_sem.raise',
    success_code: code,
    success_message: message,
  });
  await eventually(completed(id), 'the task to complete', 15_000);
  const facts = await factsOf(db, id);
  expect(rec.calls.filter((c) => c.taskId === id)).toHaveLength(1);
  expect(facts.outcome).toBe('failed');
  expect(facts.leases).toBe(1);
  expect(facts.errors).toEqual([expect.stringMatching(recorded)]);
}

describe('task errors are not lease loss (item 1)', () => {
  it('a db_function raising 55000 (the append-only trigger) is a task failure, recorded once with its message', async () => {
    await startWorker(new ProcessorRegistry().register('db_function', dbFunctionProcessor()));
    const id = await enqueue('db_function', { db_function: 'fixture_sem.touch_fact' });
    await eventually(completed(id), 'the step to complete', 15_000);
    const facts = await factsOf(db, id);
    expect(facts.outcome).toBe('failed');
    expect(facts.leases).toBe(1);
    expect(facts.errors).toHaveLength(1);
    expect(facts.errors[0]).toMatch(/fixture_sem.touch_fact raised: queues.task is append-only/);
  });

  it('a success handler raising 55000 after the provider call: one provider call, a failure with the message', async () => {
    await expectSuccessHandlerFailure(
      '55000',
      'currval of sequence is not yet defined in this session',
      /succeeded but fixture_sem.raise raised: currval of sequence is not yet defined/,
    );
  });
});

describe('a prepared statement refused after a migration', () => {
  it('PostgreSQL refusing a prepared statement whose result columns changed is transient', async () => {
    await db.query(`create function fixture_sem.columns() returns table (a integer) language sql as $$ select 1 $$`);
    const client = await db.client('owner');
    try {
      const statement = { name: 'fixture_sem_columns', text: 'select * from fixture_sem.columns()' };
      await client.query(statement);
      await db.query(`
        drop function fixture_sem.columns();
        create function fixture_sem.columns() returns table (a integer, b integer) language sql as $$ select 1, 2 $$`);
      const refused = await client.query(statement).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(classifyError(refused)).toBe('transient');
      expect(classifyError(new QueueError('refused', 'database', '0A000', { cause: refused }))).toBe('transient');
    } finally {
      await client.end();
    }
  });

  it('a success handler raising the same SQLSTATE and message is the task’s failure, recorded once', async () => {
    await expectSuccessHandlerFailure(
      '0A000',
      'cached plan must not change result type',
      /raised: cached plan must not change result type/,
    );
  });
});

describe('a completion made by someone else (item 2)', () => {
  it('the task abandoned by another claimer while its step runs: lease_lost, the step’s effects roll back', async () => {
    const id = await enqueue('db_function', { db_function: 'fixture.step', key: 'abandoned-under-me', sleep: 1.5 });
    // A first lease expires (a worker that died): the task is a suspect, and the worker's
    // lease names it the claim's suspect, so that lease's expiry counts.
    const { rows: died } = await db.query(
      `select task_id::text from queues.claim_tasks_at(now(), 'died', 10, array['db_function'], 1, 1)`,
    );
    expect(died).toEqual([{ task_id: id }]);
    const worker = await startWorker(new ProcessorRegistry().register('db_function', dbFunctionProcessor()), {
      leaseSeconds: 30,
    });
    const lost: string[] = [];
    const done: string[] = [];
    worker.on('lease_lost', (task) => lost.push(task.taskId));
    worker.on('completed', (task, report) => done.push(`${task.taskId}:${report.outcome}`));
    await eventually(async () => (await factsOf(db, id)).leases === 2, 'the worker to lease the task');
    await eventually(async () => (await stepsRunning(db)) === 1, 'the worker to start the step');
    // Another claimer (with a clock an hour ahead) finds the lease expired and abandons the task.
    await db.query(`select * from queues.claim_tasks_at(now() + interval '1 hour', 'other', 10, null, 60, 1)`);
    expect((await factsOf(db, id)).outcome).toBe('abandoned');
    await eventually(() => lost.length + done.length > 0, 'the worker to finish the step');
    expect(done).toEqual([]);
    expect(lost).toEqual([id]);
    expect(await effects(db, 'abandoned-under-me')).toBe(0);
  });
});

describe('one run of a task at a time (item 4)', () => {
  it('a second lease of a task the worker is still running is not started until the first run ends', async () => {
    const rec = recordingProvider();
    rec.close();
    await startWorker(new ProcessorRegistry().register('test_channel', channelTaskProcessor(rec.provider)), {
      leaseSeconds: 30,
      heartbeatIntervalMs: 1000,
      workerId: 'sem-twice',
    });
    const id = await enqueue('test_channel', { to: 'twice?' });
    await eventually(() => rec.calls.length === 1, 'the provider call');
    // The worker is taken for dead (last seen an hour ago) and its lease revoked; it is
    // still running the task, and claims it again.
    const client = await db.client('owner');
    try {
      await client.query('begin');
      await client.query(
        `update queues.worker set last_seen_at = now() - interval '1 hour' where worker_id = 'sem-twice'`,
      );
      const revoked = await client.query(`select * from queues.recover_stale_leases_at(now(), 10)`);
      expect(revoked.rows.map((r) => r.task_id)).toEqual([id]);
      await client.query('commit');
    } finally {
      await client.end();
    }
    await eventually(async () => (await factsOf(db, id)).leases === 2, 'the worker to claim the task again');
    // Give the second lease time to start if it were going to.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(rec.maxRunning()).toBe(1);
    rec.open();
    await eventually(completed(id), 'the task to complete');
    expect(rec.maxRunning()).toBe(1);
    expect((await factsOf(db, id)).outcome).toBe('succeeded');
  });
});

describe('transient errors are bounded (item 8)', () => {
  it('a step that always deadlocks ends dead-lettered with its error, not in an endless loop', async () => {
    await startWorker(new ProcessorRegistry().register('db_function', dbFunctionProcessor()));
    const id = await enqueue('db_function', {
      db_function: 'fixture_sem.raise',
      code: '40P01',
      message: 'deadlock detected',
    });
    await eventually(completed(id), 'the always-deadlocking step to end', 20_000);
    const facts = await factsOf(db, id);
    expect(['failed', 'abandoned']).toContain(facts.outcome);
    expect(facts.errors.at(-1)).toMatch(/deadlock detected/);
  });

  it('a transient failure after the provider call: the retry sends the same idempotency key', async () => {
    const rec = recordingProvider();
    await startWorker(new ProcessorRegistry().register('test_channel', channelTaskProcessor(rec.provider)));
    await handlerCalls(db);
    const id = await enqueue('test_channel', {
      before_handler: 'fixture.before',
      success_handler: 'fixture_sem.flaky_success',
      before: { success: true, payload: { to: 'once', idempotency_key: 'attempt-77' } },
    });
    await eventually(completed(id), 'the task to complete', 15_000);
    expect((await factsOf(db, id)).outcome).toBe('succeeded');
    const keys = rec.calls.filter((c) => c.taskId === id).map((c) => c.key);
    expect(keys.length).toBeGreaterThanOrEqual(2);
    expect(new Set(keys)).toEqual(new Set(['attempt-77']));
    expect((await handlerCalls(db)).filter((c) => c.kind === 'success')).toHaveLength(1);
  });
});

describe('validation failures are not retried (item 9)', () => {
  it('a db_function returning validation_failure_message with max_attempts 3 runs once', async () => {
    await startWorker(new ProcessorRegistry().register('db_function', dbFunctionProcessor()));
    const id = await enqueue(
      'db_function',
      {
        db_function: 'fixture.step',
        key: 'invalid-once',
        result: { success: false, validation_failure_message: 'no such account' },
      },
      3,
    );
    await eventually(completed(id), 'the step to complete', 15_000);
    // Give a retry (backoff scaled to milliseconds) the time to happen if it were going to.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await effects(db, 'invalid-once')).toBe(1);
    const facts = await factsOf(db, id);
    expect(facts.outcome).toBe('validation_failed');
    expect(facts.leases).toBe(1);
    expect(facts.errors).toEqual(['fixture.step: validation failure: no such account']);
  });
});

describe('error messages are sanitized at the worker boundary (item 10)', () => {
  it('a NUL byte in a provider’s error: the message is kept, the error handler runs, the task fails once', async () => {
    const rec = recordingProvider({ fail: 'bounced:\u0000 mailbox \ud800 full' });
    await startWorker(new ProcessorRegistry().register('test_channel', channelTaskProcessor(rec.provider)));
    await handlerCalls(db);
    const id = await enqueue('test_channel', { to: 'nul', error_handler: 'fixture.on_error' });
    await eventually(completed(id), 'the task to complete', 15_000);
    const facts = await factsOf(db, id);
    expect(facts.outcome).toBe('failed');
    expect(facts.leases).toBe(1);
    expect(facts.errors).toHaveLength(1);
    expect(facts.errors[0]).toMatch(/^recording: bounced:.* mailbox .* full$/);
    expect(facts.errors[0]).not.toContain('\u0000');
    const calls = await handlerCalls(db);
    expect(calls.map((c) => c.kind)).toEqual(['error']);
    expect(calls[0].body.error).toBe(facts.errors[0]);
  });

  it('a huge error message is kept, capped', async () => {
    const rec = recordingProvider({ fail: 'x'.repeat(200_000) });
    await startWorker(new ProcessorRegistry().register('test_channel', channelTaskProcessor(rec.provider)));
    const id = await enqueue('test_channel', { to: 'huge', error_handler: 'fixture.on_error' });
    await eventually(completed(id), 'the task to complete', 15_000);
    const facts = await factsOf(db, id);
    expect(facts.outcome).toBe('failed');
    expect(facts.errors).toHaveLength(1);
    expect(facts.errors[0].length).toBeLessThanOrEqual(10_000 + 20);
    expect(facts.errors[0]).toMatch(/^recording: xxxx/);
  });
});

describe('steps share calls', () => {
  it('the steps one slot takes run in one call: one transaction for many steps', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 60; i++)
      ids.push(await enqueue('db_function', { db_function: 'fixture_sem.record_xact', key: `x${i}` }));
    await startWorker(new ProcessorRegistry().register('db_function', dbFunctionProcessor()), { concurrency: 1 });
    await eventually(async () => (await Promise.all(ids.map((id) => completed(id)()))).every(Boolean), 'the steps');
    const { rows } = await db.query<{ xact: string; steps: number }>(
      `select xact::text, count(*)::int as steps from fixture_sem.step_xact where task_key like 'x%'
        group by xact order by xact::bigint`,
    );
    expect(rows.reduce((n, r) => n + r.steps, 0)).toBe(60);
    // A new worker's local queue holds one task beside its one slot, so its first claim
    // takes two; the slot takes both, and they run in one call.
    expect(rows[0]?.steps).toBe(2);
    // Later claims are sized by the pace of the calls so far (LOCAL_QUEUE_MS), and the slot
    // takes all that wait: on average, calls of several steps, whatever the machine's pace.
    expect(rows.length).toBeLessThanOrEqual(30);
  });
});

describe('steps of one payload', () => {
  it('run one call at a time: a second waits in the local queue, not on the first one’s locks', async () => {
    // Four identical steps, four slots: one call each unless the worker holds back those
    // whose twin is in a call under way. A step in a call of its own while its twin's call
    // holds the row would raise 55P03 (NOWAIT) and fail.
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(await enqueue('db_function', { db_function: 'fixture_sem.hold_root' }));
    await startWorker(new ProcessorRegistry().register('db_function', dbFunctionProcessor()), { concurrency: 4 });
    await eventually(async () => (await Promise.all(ids.map((id) => completed(id)()))).every(Boolean), 'the steps');
    const facts = await Promise.all(ids.map((id) => factsOf(db, id)));
    expect(facts.map((f) => [f.outcome, f.errors])).toEqual(ids.map(() => ['succeeded', []]));
    const { rows } = await db.query(
      `select count(*)::int as runs from fixture_sem.step_xact where task_key = 'hold_root'`,
    );
    expect(rows[0].runs).toBe(4);
  });
});

describe('a step blocked on a lock (item 11)', () => {
  it('fails with the statement timeout instead of being heartbeated forever; a step in the same call is not failed with it', async () => {
    const locker = await db.client('owner');
    try {
      await locker.query('begin');
      await locker.query('lock table fixture.effect in access exclusive mode');
      // Both are claimed together and run in one call (one slot, concurrency 1).
      const id = await enqueue('db_function', { db_function: 'fixture.step', key: 'blocked' });
      const beside = await enqueue('db_function', { db_function: 'fixture_sem.record_xact', key: 'beside-blocked' });
      await startWorker(new ProcessorRegistry().register('db_function', dbFunctionProcessor()), {
        leaseSeconds: 30,
        statementTimeoutMs: 1000,
        concurrency: 1,
      });
      await eventually(completed(id), 'the blocked step to fail', 15_000);
      const facts = await factsOf(db, id);
      expect(facts.outcome).toBe('failed');
      expect(facts.errors[0]).toMatch(/statement timeout/);
      await eventually(completed(beside), 'the other step to complete');
      expect(await factsOf(db, beside)).toEqual({ outcome: 'succeeded', errors: [], leases: 1 });
    } finally {
      await locker.query('rollback');
      await locker.end();
    }
  });
});
