// The supervisor blocks (sql/internal/process_supervisor.sql) one by one, on a process of
// their own made here: job.job_task (about a subject), its supervisor runs and its
// terminal facts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { rowCounts } from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await db.query(`
    create schema job;
    create table job.job_task (job_task_id bigint generated always as identity primary key,
                               subject_id bigint not null unique);
    create table job.job_supervisor_run (id bigint generated always as identity primary key,
                                         job_task_id bigint not null references job.job_task on delete cascade);
    create table job.job_task_succeeded (job_task_id bigint primary key references job.job_task on delete cascade);
    create table job.job_task_failed (job_task_id bigint primary key references job.job_task on delete cascade,
                                      reason text not null);
  `);
});
afterAll(async () => {
  await db?.drop();
});

let nextSubject = 1;
const root = async () =>
  (
    await db.query(`select root_id::int as id from internal.create_process_root('job', 'job', 'subject_id', $1)`, [
      nextSubject++,
    ])
  ).rows[0].id as number;
const supervisorTasks = async (id: number) =>
  (
    await db.query(
      `select t.payload, t.scheduled_at from queues.task t
        where t.task_type = 'db_function' and t.payload @> jsonb_build_object('job_task_id', $1::bigint) order by t.task_id`,
      [id],
    )
  ).rows;

describe('roots', () => {
  it('create_process_root creates one root per subject and says whether it did', async () => {
    const subject = nextSubject++;
    const create = async () =>
      (
        await db.query(
          `select root_id::int as id, created from internal.create_process_root('job', 'job', 'subject_id', $1)`,
          [subject],
        )
      ).rows[0];
    const first = await create();
    expect(first.created).toBe(true);
    const before = await rowCounts(db, ['job', 'queues']);
    expect(await create()).toEqual({ id: first.id, created: false });
    expect(await rowCounts(db, ['job', 'queues'])).toEqual(before);
  });

  it('start_process enqueues the first run once, at the time asked', async () => {
    const subject = nextSubject++;
    const at = '2031-01-02T03:04:05.000Z';
    const startIt = async () =>
      (
        await db.query(
          `select root_id::int as id, created from internal.start_process('job', 'job', 'job.supervisor', 'subject_id', $1, $2)`,
          [subject, at],
        )
      ).rows[0];
    const first = await startIt();
    expect(first.created).toBe(true);
    expect(await startIt()).toEqual({ id: first.id, created: false });
    const tasks = await supervisorTasks(first.id);
    expect(tasks).toHaveLength(1);
    expect(tasks[0].payload).toEqual({
      task_type: 'db_function',
      db_function: 'job.supervisor',
      job_task_id: first.id,
    });
    expect(new Date(tasks[0].scheduled_at as string).toISOString()).toBe(at);
  });
});

describe('open_supervisor_run', () => {
  const open = async (payload: unknown) =>
    (
      await db.query(
        `select root_id::int, refusal from internal.open_supervisor_run('job', 'job', 'job.supervisor', $1)`,
        [JSON.stringify(payload)],
      )
    ).rows[0];

  it('returns the locked root, or the validation failure to return', async () => {
    const id = await root();
    expect(await open({ job_task_id: id })).toEqual({ root_id: id, refusal: null });
    expect(await open({ job_task_id: -1 })).toEqual({
      root_id: null,
      refusal: { success: false, validation_failure_message: 'job_task_id must be a positive integer' },
    });
    expect(await open({ job_task_id: 99999999 })).toEqual({
      root_id: null,
      refusal: { success: false, validation_failure_message: 'job_task 99999999 not found' },
    });
  });

  it('holds the root locked until the transaction ends', async () => {
    const id = await root();
    const holder = await db.client('owner');
    const other = await db.client('owner');
    try {
      await holder.query('begin');
      await holder.query(`select internal.open_supervisor_run('job', 'job', 'job.supervisor', $1)`, [
        JSON.stringify({ job_task_id: id }),
      ]);
      await other.query(`set lock_timeout = '200ms'`);
      await expect(
        other.query('select 1 from job.job_task where job_task_id = $1 for no key update', [id]),
      ).rejects.toMatchObject({ code: '55P03' });
      // A fact referencing the root (FOR KEY SHARE) does not wait on it.
      await expect(
        other.query('insert into job.job_supervisor_run (job_task_id) values ($1)', [id]),
      ).resolves.toBeDefined();
      await holder.query('rollback');
    } finally {
      await holder.end();
      await other.end();
    }
  });

  it('refuses REPEATABLE READ with 25000 after validating the payload', async () => {
    const client = await db.client('owner');
    try {
      await client.query('begin isolation level repeatable read');
      expect(
        (await client.query(`select refusal from internal.open_supervisor_run('job', 'job', 'job.supervisor', '{}')`))
          .rows[0].refusal,
      ).toMatchObject({ success: false });
      await expect(
        client.query(`select internal.open_supervisor_run('job', 'job', 'job.supervisor', '{"job_task_id": 1}')`),
      ).rejects.toMatchObject({ code: '25000' });
      await client.query('rollback');
    } finally {
      await client.end();
    }
  });
});

describe('facts and effects', () => {
  const terminal = async (id: number) =>
    (await db.query(`select * from internal.process_terminal_facts('job', 'job', $1)`, [id])).rows[0];

  it('record_process_outcome: the first outcome stays', async () => {
    const failed = await root();
    expect(await terminal(failed)).toEqual({ has_task_succeeded: false, task_failure: null });
    await db.query(`select internal.record_process_outcome('job', 'job', $1, 'gave up')`, [failed]);
    await db.query(`select internal.record_process_outcome('job', 'job', $1, 'again')`, [failed]);
    expect(await terminal(failed)).toEqual({ has_task_succeeded: false, task_failure: 'gave up' });

    const succeeded = await root();
    await db.query(`select internal.record_process_outcome('job', 'job', $1, null)`, [succeeded]);
    await db.query(`select internal.record_process_outcome('job', 'job', $1, null)`, [succeeded]);
    expect(await terminal(succeeded)).toEqual({ has_task_succeeded: true, task_failure: null });
  });

  it('record_supervisor_run and count_supervisor_runs count per root', async () => {
    const a = await root();
    const b = await root();
    for (let i = 0; i < 3; i++) await db.query(`select internal.record_supervisor_run('job', 'job', $1)`, [a]);
    const runs = async (id: number) =>
      (await db.query(`select internal.count_supervisor_runs('job', 'job', $1) as n`, [id])).rows[0].n;
    expect(await runs(a)).toBe(3);
    expect(await runs(b)).toBe(0);
  });

  it('schedule_next_supervisor_run enqueues the run at now() + internal.backoff and returns that time', async () => {
    const id = await root();
    const client = await db.client('owner');
    try {
      await client.query('begin');
      const { rows } = await client.query(
        `select internal.schedule_next_supervisor_run('job.supervisor', 'job_task_id', $1, 3, 30) as at,
                now() + internal.backoff(3, 30) as expected`,
        [id],
      );
      await client.query('commit');
      expect(rows[0].at).toEqual(rows[0].expected);
      const tasks = await supervisorTasks(id);
      expect(tasks).toHaveLength(1);
      expect(tasks[0].scheduled_at).toEqual(rows[0].at);
    } finally {
      await client.end();
    }
  });

  it('supervisor_progress builds the envelope of a run that did its job', async () => {
    const { rows } = await db.query(
      `select internal.supervisor_progress('waiting') as plain,
              internal.supervisor_progress('waiting', '{"next_check_at": "x"}') as extra`,
    );
    expect(rows[0]).toEqual({
      plain: { success: true, payload: { status: 'waiting' } },
      extra: { success: true, payload: { status: 'waiting', next_check_at: 'x' } },
    });
  });
});
