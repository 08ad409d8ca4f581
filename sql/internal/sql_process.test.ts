// The pure SQL process skeleton (sql/internal/sql_process.sql), on a process of its own
// made here: tidy.tidy_task, its attempt and terminal facts, and a work function that
// writes, then raises for the subjects listed in tidy.failing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { rowCounts } from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await db.query(`
    create schema tidy;
    create table tidy.tidy_task (tidy_task_id bigint generated always as identity primary key,
                                 subject_id bigint not null unique);
    create table tidy.tidy_attempt (tidy_attempt_id bigint generated always as identity primary key,
                                    tidy_task_id bigint not null references tidy.tidy_task on delete cascade);
    create table tidy.tidy_attempt_succeeded (tidy_attempt_id bigint primary key references tidy.tidy_attempt on delete cascade);
    create table tidy.tidy_attempt_failed (tidy_attempt_id bigint primary key references tidy.tidy_attempt on delete cascade,
                                           error_message text not null);
    create table tidy.tidy_task_succeeded (tidy_task_id bigint primary key references tidy.tidy_task on delete cascade);
    create table tidy.tidy_task_failed (tidy_task_id bigint primary key references tidy.tidy_task on delete cascade,
                                        reason text not null);
    create table tidy.tidied (subject_id bigint not null);
    create table tidy.failing (subject_id bigint primary key);
    create function tidy.tidy(_subject_id bigint) returns void language plpgsql volatile
      set search_path = pg_catalog, pg_temp as $$
    begin
      insert into tidy.tidied (subject_id) values (_subject_id);
      if exists (select 1 from tidy.failing f where f.subject_id = _subject_id) then
        raise exception 'subject % refused', _subject_id;
      end if;
    end;
    $$;
    create function tidy.tidy_supervisor(payload jsonb) returns jsonb language sql volatile
      set search_path = pg_catalog, pg_temp as $$
      select internal.run_sql_process_supervisor('tidy', 'tidy', 'tidy.tidy_supervisor', payload,
        _work => 'tidy.tidy(bigint)', _work_column => 'subject_id', _max_attempts => 2, _backoff_cap_seconds => 60)
    $$;
  `);
});
afterAll(async () => {
  await db?.drop();
});

let nextSubject = 1;
/** A new root through internal.start_process; returns its id. */
async function start(failing = false): Promise<{ id: number; subject: number }> {
  const subject = nextSubject++;
  if (failing) await db.query('insert into tidy.failing (subject_id) values ($1)', [subject]);
  const { rows } = await db.query(
    `select root_id::int as id, created from internal.start_process('tidy', 'tidy', 'tidy.tidy_supervisor', 'subject_id', $1)`,
    [subject],
  );
  expect(rows[0].created).toBe(true);
  return { id: rows[0].id as number, subject };
}
const supervise = async (payload: unknown) =>
  (await db.query('select tidy.tidy_supervisor($1::jsonb) as r', [JSON.stringify(payload)])).rows[0].r;
const count = async (sql: string, params: unknown[]) => (await db.query(sql, params)).rowCount;

describe('internal.run_sql_process_supervisor', () => {
  it('the work succeeds: one attempt, the terminal fact, and a later run changes nothing', async () => {
    const { id, subject } = await start();
    expect(await supervise({ tidy_task_id: id })).toEqual({ success: true, payload: { status: 'succeeded' } });
    expect(await count('select 1 from tidy.tidied where subject_id = $1', [subject])).toBe(1);
    expect(await count('select 1 from tidy.tidy_task_succeeded where tidy_task_id = $1', [id])).toBe(1);
    const before = await rowCounts(db, ['tidy', 'queues']);
    expect(await supervise({ tidy_task_id: id })).toEqual({ success: true, payload: { status: 'succeeded' } });
    expect(await rowCounts(db, ['tidy', 'queues'])).toEqual(before);
  });

  it('the work fails: rolled back, retried after the backoff, then max_attempts_reached', async () => {
    const { id, subject } = await start(true);
    const started = Date.now();
    const first = await supervise({ tidy_task_id: id });
    expect(first).toMatchObject({
      success: true,
      payload: { status: 'attempt_failed', error: `subject ${subject} refused` },
    });
    // The next run is enqueued at next_check_at, 5 s · 2^1 after the run (backoff_scale 1 unless set).
    const { rows: next } = await db.query(
      `select t.scheduled_at, (select coalesce(max(s.value::numeric), 1) from internal.setting s where s.name = 'backoff_scale') as scale
         from queues.task t where t.payload @> jsonb_build_object('db_function', 'tidy.tidy_supervisor', 'tidy_task_id', $1::bigint)
        order by t.task_id desc limit 1`,
      [id],
    );
    expect(new Date(next[0].scheduled_at as string).toISOString()).toBe(
      new Date(first.payload.next_check_at as string).toISOString(),
    );
    const delayMs = new Date(first.payload.next_check_at as string).getTime() - started;
    expect(delayMs).toBeGreaterThan(10_000 * Number(next[0].scale) - 1_000);
    expect(delayMs).toBeLessThan(10_000 * Number(next[0].scale) + 5_000);
    // The failed attempt's writes were rolled back.
    expect(await count('select 1 from tidy.tidied where subject_id = $1', [subject])).toBe(0);

    expect(await supervise({ tidy_task_id: id })).toEqual({
      status: 'max_attempts_reached',
      payload: { error: `subject ${subject} refused` },
    });
    expect((await db.query('select reason from tidy.tidy_task_failed where tidy_task_id = $1', [id])).rows).toEqual([
      { reason: 'max_attempts_reached' },
    ]);
    const before = await rowCounts(db, ['tidy', 'queues']);
    expect(await supervise({ tidy_task_id: id })).toEqual({ status: 'max_attempts_reached' });
    expect(await rowCounts(db, ['tidy', 'queues'])).toEqual(before);
    expect(await count('select 1 from tidy.tidy_attempt where tidy_task_id = $1', [id])).toBe(2);
  });

  it('failures already at the maximum end the process without running the work again', async () => {
    const { id, subject } = await start();
    for (let i = 0; i < 2; i++) {
      await db.query(
        `with a as (insert into tidy.tidy_attempt (tidy_task_id) values ($1) returning tidy_attempt_id)
         insert into tidy.tidy_attempt_failed (tidy_attempt_id, error_message) select tidy_attempt_id, 'earlier' from a`,
        [id],
      );
    }
    expect(await supervise({ tidy_task_id: id })).toEqual({ status: 'max_attempts_reached' });
    expect(await count('select 1 from tidy.tidied where subject_id = $1', [subject])).toBe(0);
    expect(await count('select 1 from tidy.tidy_attempt where tidy_task_id = $1', [id])).toBe(2);
  });

  it('bad payloads and unknown roots are validation failures that write nothing', async () => {
    const before = await rowCounts(db, ['tidy', 'queues']);
    for (const payload of [{}, { tidy_task_id: 'x' }, { tidy_task_id: 0 }, { tidy_task_id: 5e20 }, []]) {
      expect(await supervise(payload)).toEqual({
        success: false,
        validation_failure_message: 'tidy_task_id must be a positive integer',
      });
    }
    expect(await supervise({ tidy_task_id: 99999999 })).toEqual({
      success: false,
      validation_failure_message: 'tidy_task 99999999 not found',
    });
    expect(await rowCounts(db, ['tidy', 'queues'])).toEqual(before);
  });

  it('refuses REPEATABLE READ with 25000, naming the supervisor, and writes nothing', async () => {
    const { id } = await start();
    const before = await rowCounts(db, ['tidy', 'queues']);
    const client = await db.client('owner');
    try {
      await client.query('begin isolation level repeatable read');
      await expect(
        client.query('select tidy.tidy_supervisor($1::jsonb)', [JSON.stringify({ tidy_task_id: id })]),
      ).rejects.toMatchObject({
        code: '25000',
        message: 'tidy.tidy_supervisor must run under READ COMMITTED, not REPEATABLE READ',
      });
      await client.query('rollback');
    } finally {
      await client.end();
    }
    expect(await rowCounts(db, ['tidy', 'queues'])).toEqual(before);
  });
});

describe('internal.sql_attempt_facts', () => {
  it('counts attempts and failures, and sees a success', async () => {
    const { id } = await start(true);
    const facts = async () =>
      (await db.query(`select * from internal.sql_attempt_facts('tidy', 'tidy', $1)`, [id])).rows[0];
    expect(await facts()).toEqual({ has_success: false, num_attempts: 0, num_failures: 0 });
    await supervise({ tidy_task_id: id });
    expect(await facts()).toEqual({ has_success: false, num_attempts: 1, num_failures: 1 });
    await db.query('delete from tidy.failing');
    await supervise({ tidy_task_id: id });
    expect(await facts()).toEqual({ has_success: true, num_attempts: 2, num_failures: 1 });
  });
});
