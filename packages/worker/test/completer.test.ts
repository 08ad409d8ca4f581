// The completer's completions with effects (completer.ts): each in a transaction of its
// own, several side by side, so one whose effects wait does not hold the others back;
// and completions whose statement PostgreSQL refused after a migration are sent again.
import { afterAll, beforeAll, expect, it } from 'vitest';
import pg from 'pg';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { claimTasks, releaseLeases } from '@org/queue-client';
import { Completer, createLogger, type CompletionSink } from '../src/index.js';
import { enqueue, factsOf, installFixtures } from './support/fixtures.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await installFixtures(db);
});
afterAll(async () => {
  await db?.drop();
});

it('a completion whose effects wait holds back neither the other completions with effects nor their commits', async () => {
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) ids.push(await enqueue(db, 'db_function', { i }));
  const tasks = await claimTasks(db.pool('worker'), {
    workerId: 'completer-test',
    limit: 3,
    taskTypes: ['db_function'],
  });
  expect(tasks.map((t) => t.taskId).sort()).toEqual([...ids].sort());
  const holder = await db.client('owner');
  const completer = new Completer(db.url('worker'), createLogger('silent'));
  try {
    // The first task's effects wait for an advisory lock the test holds.
    await holder.query('select pg_advisory_lock(4242)');
    const [slow, ...rest] = tasks;
    const slowDone = completer.complete(slow, {
      outcome: 'succeeded',
      effects: async (client) => {
        await client.query('select pg_advisory_xact_lock(4242)');
      },
    });
    // Asked for in the same turn: one round of the completer.
    const others = rest.map((t) =>
      completer.complete(t, {
        outcome: 'succeeded',
        effects: async (client) => {
          await client.query('select 1');
        },
      }),
    );
    // The others commit while the first still waits (one connection would take them in
    // turn, behind it).
    for (const settled of await Promise.all(others)) expect(settled.result).toBe('completed');
    for (const t of rest) expect((await factsOf(db, t.taskId)).outcome).toBe('succeeded');
    expect((await factsOf(db, slow.taskId)).outcome).toBeNull();
    await holder.query('select pg_advisory_unlock(4242)');
    expect((await slowDone).result).toBe('completed');
    expect((await factsOf(db, slow.taskId)).outcome).toBe('succeeded');
  } finally {
    await holder.query('select pg_advisory_unlock_all()');
    await holder.end();
    await completer.close();
  }
});

it('records completions whose statement PostgreSQL refused after a migration changed its result columns', async () => {
  for (let i = 0; i < 4; i++) await enqueue(db, 'db_function', { migrated: i });
  const [first, ...rest] = await claimTasks(db.pool('worker'), {
    workerId: 'completer-migration-test',
    limit: 4,
    taskTypes: ['db_function'],
  });
  const completer = new Completer(db.url('worker'), createLogger('silent'));
  try {
    // The completer's connection prepares the settling statement.
    expect((await completer.complete(first, { outcome: 'succeeded' })).result).toBe('completed');
    // A migration: queues.settle_tasks now answers its result as varchar instead of text.
    const worker = pg.escapeIdentifier(db.dbUsers.worker);
    const signature = 'bigint[], bigint[], text[], boolean[], bigint[], text[], bigint[]';
    await db.query(`
      alter function queues.settle_tasks(${signature}) rename to settle_tasks_before;
      create function queues.settle_tasks(
        _task_ids bigint[], _task_lease_ids bigint[] default null, _outcomes text[] default null,
        _retries boolean[] default null, _error_task_ids bigint[] default null,
        _error_messages text[] default null, _started_us bigint[] default null
      ) returns table (task_id bigint, result varchar)
        language sql security definer set search_path = pg_catalog, pg_temp
        as $$ select * from queues.settle_tasks_before(_task_ids, _task_lease_ids, _outcomes, _retries,
                                                       _error_task_ids, _error_messages, _started_us) $$;
      revoke execute on function queues.settle_tasks(${signature}) from public;
      grant execute on function queues.settle_tasks(${signature}) to ${worker};`);
    try {
      // One round for the three: refused once, sent again, recorded; none interrupted.
      const settled = await Promise.all(rest.map((t) => completer.complete(t, { outcome: 'succeeded' })));
      expect(settled.map((s) => s.result)).toEqual(['completed', 'completed', 'completed']);
      for (const t of rest) expect((await factsOf(db, t.taskId)).outcome).toBe('succeeded');
    } finally {
      await db.query(`
        drop function queues.settle_tasks(${signature});
        alter function queues.settle_tasks_before(${signature}) rename to settle_tasks;`);
    }
  } finally {
    await completer.close();
  }
});

it('completes the handler completions of a round together; a lost lease refuses only its own', async () => {
  for (let i = 0; i < 3; i++) await enqueue(db, 'db_function', { handled: i });
  const tasks = await claimTasks(db.pool('worker'), {
    workerId: 'completer-handlers',
    limit: 3,
    taskTypes: ['db_function'],
  });
  expect(tasks.length).toBe(3);
  // A fourth task's lease is revoked before its completion: it is refused.
  await enqueue(db, 'db_function', { handled: 'lost' });
  const [lost] = await claimTasks(db.pool('worker'), {
    workerId: 'completer-lost',
    limit: 1,
    taskTypes: ['db_function'],
  });
  await db.query(`select queues.revoke_worker_leases('completer-lost')`);
  const completer = new Completer(db.url('worker'), createLogger('silent'));
  try {
    const handler = (mode: 'success' | 'error', functionName = 'internal.noop') => ({
      functionName,
      body: {},
      mode,
      raisedPrefix: 'handler raised: ',
    });
    // Asked for in the same turn: one round, its handler completions in one statement.
    const settled = await Promise.all([
      completer.complete(lost, { outcome: 'succeeded', handler: handler('success') }),
      completer.complete(tasks[0], { outcome: 'succeeded', handler: handler('success') }),
      completer.complete(tasks[1], { outcome: 'failed', error: 'provider said no', handler: handler('error') }),
      completer.complete(tasks[2], { outcome: 'succeeded', handler: handler('success', 'internal.nothing_here') }),
    ]);
    expect(settled.map((s) => s.result)).toEqual(['lease_lost', 'completed', 'completed', 'completed']);
    expect(settled[1].report).toEqual({ outcome: 'succeeded' });
    expect(settled[2].report).toEqual({ outcome: 'failed', error: 'provider said no' });
    expect(settled[3].report.outcome).toBe('failed');
    expect(settled[3].report.error).toMatch(/^handler raised: function internal\.nothing_here\(jsonb\) does not exist/);
    expect((await factsOf(db, lost.taskId)).outcome).toBeNull();
    expect((await factsOf(db, tasks[0].taskId)).outcome).toBe('succeeded');
    expect((await factsOf(db, tasks[1].taskId)).outcome).toBe('failed');
    expect((await factsOf(db, tasks[2].taskId)).outcome).toBe('failed');
  } finally {
    await completer.close();
  }
});

it('sends a round of handler completions in statements of at most 50, each one transaction', async () => {
  // The handler notes the transaction it runs in: a statement of queues.settle_with_handlers
  // is one transaction for all of its completions.
  await db.query(`
    create table fixture.handler_xact (task_id bigint, xact bigint);
    grant insert on fixture.handler_xact to ${db.dbUsers.worker};
    create function fixture.note_xact(payload jsonb) returns jsonb
      language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
    begin
      insert into fixture.handler_xact values ((payload->>'task_id')::bigint, txid_current());
      return '{"success": true}'::jsonb;
    end $$;
    revoke execute on function fixture.note_xact(jsonb) from public;
    grant execute on function fixture.note_xact(jsonb) to ${db.dbUsers.worker};
    select internal.register_runnable_function('fixture.note_xact(jsonb)');`);
  const n = 120;
  for (let i = 0; i < n; i++) await enqueue(db, 'db_function', { noted: i });
  const tasks = await claimTasks(db.pool('worker'), {
    workerId: 'completer-noted',
    limit: n,
    taskTypes: ['db_function'],
  });
  expect(tasks.length).toBe(n);
  const completer = new Completer(db.url('worker'), createLogger('silent'));
  try {
    const settled = await Promise.all(
      tasks.map((t) =>
        completer.complete(t, {
          outcome: 'succeeded',
          handler: {
            functionName: 'fixture.note_xact',
            body: { task_id: t.taskId },
            mode: 'success',
            raisedPrefix: 'handler raised: ',
          },
        }),
      ),
    );
    expect(settled.every((s) => s.result === 'completed')).toBe(true);
    const { rows } = await db.query<{ tasks: number; xacts: number; largest: number }>(
      `select count(*)::int as tasks, count(distinct xact)::int as xacts,
              (select max(c)::int from (select count(*) as c from fixture.handler_xact group by xact) g) as largest
         from fixture.handler_xact`,
    );
    // Asked for in one turn: ceil(120 / 50) statements, none past 50 (one per completion
    // if the batched statement were refused and each were sent alone).
    expect(rows[0]).toEqual({ tasks: n, xacts: 3, largest: 50 });
  } finally {
    await completer.close();
  }
});

it('answers a completion recorded with a sink through it, in its round, with the run it was given', async () => {
  for (let i = 0; i < 3; i++) await enqueue(db, 'db_function', { sink: i });
  const [kept, other, released] = await claimTasks(db.pool('worker'), {
    workerId: 'completer-sink',
    limit: 3,
    taskTypes: ['db_function'],
  });
  // The third task's lease is given back: its completion is refused.
  await releaseLeases(db.pool('worker'), [{ taskId: released.taskId, taskLeaseId: released.taskLeaseId }]);
  const completer = new Completer(db.url('worker'), createLogger('silent'));
  const answers: { run: string; result?: string; outcome?: string; error?: unknown }[] = [];
  let answered!: () => void;
  const allAnswered = new Promise<void>((resolve) => (answered = resolve));
  const sink: CompletionSink<string> = {
    settled: (run, settled) => {
      answers.push({ run, result: settled.result, outcome: settled.report.outcome });
      if (answers.length === 3) answered();
    },
    failed: (run, error) => {
      answers.push({ run, error });
      if (answers.length === 3) answered();
    },
  };
  try {
    completer.record(kept, { outcome: 'succeeded' }, Date.now(), sink, 'kept');
    completer.record(other, { outcome: 'failed', error: 'no good', final: true }, Date.now(), sink, 'other');
    completer.record(released, { outcome: 'succeeded' }, Date.now(), sink, 'released');
    await allAnswered;
    expect(answers.sort((a, b) => a.run.localeCompare(b.run))).toEqual([
      { run: 'kept', result: 'completed', outcome: 'succeeded' },
      { run: 'other', result: 'completed', outcome: 'failed' },
      { run: 'released', result: 'lease_lost', outcome: 'succeeded' },
    ]);
    expect((await factsOf(db, kept.taskId)).outcome).toBe('succeeded');
    expect((await factsOf(db, other.taskId)).outcome).toBe('failed');
  } finally {
    await completer.close();
  }
  // A round that cannot reach the database answers each completion through `failed`.
  const unreachable = new Completer('postgres://nobody@127.0.0.1:1/none', createLogger('silent'));
  const failed = await new Promise<{ run: string; error: unknown }>((resolve) =>
    unreachable.record(
      kept,
      { outcome: 'succeeded' },
      Date.now(),
      {
        settled: () => resolve({ run: 'settled', error: undefined }),
        failed: (run: string, error) => resolve({ run, error }),
      },
      'unreachable',
    ),
  );
  expect(failed.run).toBe('unreachable');
  expect(failed.error).toBeInstanceOf(Error);
  await unreachable.close();
});

// The driver closes a pool's idle connection after 10 s by default; a completion after a
// quiet spell then waited for a new connection and planned its statements again.
it('keeps its connection open while idle: a completion after a quiet spell uses the connection it had', async () => {
  const completer = new Completer(db.url('worker'), createLogger('silent'));
  const completerBackends = async () => {
    const { rows } = await db.query<{ pid: number }>(
      `select pid from pg_stat_activity
        where datname = current_database() and application_name = 'queue-worker-completer' order by pid`,
    );
    return rows.map((r) => r.pid);
  };
  const completeOne = async (i: number) => {
    await enqueue(db, 'db_function', { idle: i });
    // (the claim may take a task an earlier test gave back: any one will do)
    const [task] = await claimTasks(db.pool('worker'), {
      workerId: 'completer-idle',
      limit: 1,
      taskTypes: ['db_function'],
    });
    expect(task).toBeDefined();
    expect((await completer.complete(task, { outcome: 'succeeded' })).result).toBe('completed');
  };
  try {
    await completeOne(1);
    const before = await completerBackends();
    expect(before).toHaveLength(1);
    // Longer than the driver's default idle timeout (10 s).
    await new Promise((resolve) => setTimeout(resolve, 10_500));
    expect(await completerBackends()).toEqual(before);
    await completeOne(2);
    expect(await completerBackends()).toEqual(before);
  } finally {
    await completer.close();
  }
}, 60_000);
