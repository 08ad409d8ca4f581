// The start recorder: a task's start is marked (queues.task_lease_started) by a statement
// written before the task runs: at once when no mark is unanswered, else one statement
// for the starts of one turn of the event loop; leases that are no longer current are
// reported, not marked; a start written before its process is killed is recorded.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import pg from 'pg';
import { createTestDatabase, type TestDatabase } from '@org/db-tools/testing';
import { claimTasks, completeTask, connect, type ClaimedTask } from '@org/queue-client';
import { createLogger, StartRecorder } from '../src/index.js';
import { enqueue, eventually, installFixtures } from './support/fixtures.js';

let db: TestDatabase;
let pool: pg.Pool;
let starts: StartRecorder;

beforeAll(async () => {
  db = await createTestDatabase();
  await installFixtures(db);
  pool = connect({ connectionString: db.url('worker') });
  starts = new StartRecorder(db.url('worker'), createLogger('silent'), 10_000);
});
afterAll(async () => {
  await starts?.close();
  await pool?.end();
  await db?.drop();
});

async function claim(n: number): Promise<ClaimedTask[]> {
  for (let i = 0; i < n; i++) await enqueue(db, 'test_channel', { i });
  return claimTasks(pool, { workerId: 'recorder-test', limit: n, taskTypes: ['test_channel'] });
}

async function marked(tasks: ClaimedTask[]): Promise<string[]> {
  const { rows } = await db.query(
    `select task_lease_id::text as id from queues.task_lease_started where task_lease_id = any($1::bigint[]) order by 1`,
    [tasks.map((t) => t.taskLeaseId)],
  );
  return rows.map((r) => r.id as string);
}

it('marks the starts asked for in one turn of the event loop with one statement', async () => {
  const tasks = await claim(3);
  expect(tasks).toHaveLength(3);
  const records = tasks.map((t) => starts.record([t]));
  // One group: the three share the promise of one written statement.
  expect(new Set(records.map((r) => r.written)).size).toBe(1);
  await Promise.all(records.map((r) => r.written));
  const answers = await Promise.all(records.map((r) => r.answer));
  expect(answers.every((lost) => lost.size === 0)).toBe(true);
  expect(await marked(tasks)).toEqual(tasks.map((t) => t.taskLeaseId).sort());
  await db.query(`delete from queues.task_pending where task_type = 'test_channel'`);
});

it('writes at once when no mark is unanswered (a pickup), and batches the turn while one is', async () => {
  const [first, second, third] = await claim(3);
  // Idle: the statement goes out before the turn's other callbacks (setImmediate) run.
  let turnEnded = false;
  setImmediate(() => (turnEnded = true));
  const idle = starts.record([first]);
  await idle.written;
  expect(turnEnded).toBe(false);
  // Busy (the first mark is unanswered: its answer needs a round trip, and only
  // microtasks ran since): starts asked for apart in one turn share one statement.
  const busy = starts.record([second]);
  await Promise.resolve();
  const later = starts.record([third]);
  expect(later.written).toBe(busy.written);
  await Promise.all([idle.answer, busy.answer, later.answer]);
  expect(await marked([first, second, third])).toEqual([first, second, third].map((t) => t.taskLeaseId).sort());
  await db.query(`delete from queues.task_pending where task_type = 'test_channel'`);
});

it('reports a lease taken over before the start and does not mark it; a task completed first is marked', async () => {
  await enqueue(db, 'test_channel', { n: 'taken over' });
  // A lease of one second: it expires, and another claimer takes the task over.
  const [takenOver] = await claimTasks(pool, {
    workerId: 'recorder-test',
    limit: 1,
    taskTypes: ['test_channel'],
    leaseSeconds: 1,
  });
  const [completed, held] = await claim(2);
  const { rows } = await db.query(
    `select task_id::text from queues.claim_tasks_at(now() + interval '1 minute', 'other', 10, array['test_channel'], 60, 5)`,
  );
  expect(rows.map((r) => r.task_id as string)).toEqual([takenOver.taskId]);
  await completeTask(pool, { taskId: completed.taskId, taskLeaseId: completed.taskLeaseId, outcome: 'succeeded' });
  const record = starts.record([takenOver, completed, held]);
  await record.written;
  // The completed task did start: its mark, arriving after its completion, is recorded.
  expect([...(await record.answer)]).toEqual([takenOver.taskLeaseId]);
  expect(await marked([takenOver, completed, held])).toEqual([completed.taskLeaseId, held.taskLeaseId].sort());
  await db.query(`delete from queues.task_pending where task_type = 'test_channel'`);
});

/**
 * Runs a process (the built worker) that records the start of `task` and kills itself
 * with SIGKILL: once the start is written (`afterWritten`), or at once, before it is.
 */
function recordAndDie(task: ClaimedTask, afterWritten: boolean): Promise<NodeJS.Signals | null> {
  const snippet = `
    import { createLogger, StartRecorder } from './dist/index.js';
    const starts = new StartRecorder(process.env.START_URL, createLogger('silent'), 10000);
    const record = starts.record([JSON.parse(process.env.START_TASK)]);
    if (process.env.AFTER_WRITTEN === '1') await record.written;
    process.kill(process.pid, 'SIGKILL');
  `;
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--input-type=module', '-e', snippet],
      {
        cwd: fileURLToPath(new URL('..', import.meta.url)),
        env: {
          ...process.env,
          START_URL: db.url('worker'),
          START_TASK: JSON.stringify({ taskId: task.taskId, taskLeaseId: task.taskLeaseId }),
          AFTER_WRITTEN: afterWritten ? '1' : '0',
        },
      },
      (error) => resolve((error as { signal?: NodeJS.Signals } | null)?.signal ?? null),
    );
  });
}

it('a start written before the process is killed (SIGKILL) is recorded; one not yet written is not', async () => {
  const [written, unwritten] = await claim(2);
  expect(await recordAndDie(written, true)).toBe('SIGKILL');
  expect(await recordAndDie(unwritten, false)).toBe('SIGKILL');
  // The statement written before the kill reaches the server and commits.
  await eventually(async () => (await marked([written])).length === 1, 'the written start to be recorded', 10_000);
  expect(await marked([written, unwritten])).toEqual([written.taskLeaseId]);
  await db.query(`delete from queues.task_pending where task_type = 'test_channel'`);
});

it('refuses mismatched or oversized input with a clear error', async () => {
  await expect(
    db.pool('worker').query(`select queues.mark_started(array[1, 2]::bigint[], array[1]::bigint[])`),
  ).rejects.toThrow(/same length/);
  await expect(
    db
      .pool('worker')
      .query(
        `select queues.mark_started(array(select generate_series(1, 1001))::bigint[], array(select generate_series(1, 1001))::bigint[])`,
      ),
  ).rejects.toThrow(/at most 1000/);
  await expect(db.pool('app').query(`select queues.mark_started('{}', '{}')`)).rejects.toThrow(/permission denied/);
});

it('marks a start whose statement PostgreSQL refused after a migration changed its result columns', async () => {
  const [before, after] = await claim(2);
  // The recorder's connection prepares the marking statement.
  await starts.record([before]).answer;
  // A migration: queues.mark_started now answers numeric ids instead of bigint ones.
  const worker = pg.escapeIdentifier(db.dbUsers.worker);
  await db.query(`
    alter function queues.mark_started(bigint[], bigint[]) rename to mark_started_before;
    create function queues.mark_started(_task_ids bigint[], _task_lease_ids bigint[]) returns setof numeric
      language sql security definer set search_path = pg_catalog, pg_temp
      as $$ select s::numeric from queues.mark_started_before(_task_ids, _task_lease_ids) s $$;
    revoke execute on function queues.mark_started(bigint[], bigint[]) from public;
    grant execute on function queues.mark_started(bigint[], bigint[]) to ${worker};`);
  try {
    const record = starts.record([after]);
    await record.written;
    expect((await record.answer).size).toBe(0);
    expect(await marked([before, after])).toEqual([before.taskLeaseId, after.taskLeaseId].sort());
  } finally {
    await db.query(`
      drop function queues.mark_started(bigint[], bigint[]);
      alter function queues.mark_started_before(bigint[], bigint[]) rename to mark_started;`);
    await db.query(`delete from queues.task_pending where task_type = 'test_channel'`);
  }
});
