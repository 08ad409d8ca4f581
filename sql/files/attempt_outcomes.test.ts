// File deletion when the queue gives up on its file_delete tasks (the worker dies with
// each one until the claim abandons it): the attempts fail, the deletion gets stuck, and
// the account deletion fails naming the file. A file whose account deletion failed is
// never deleted afterwards, and the files service may sign only scheduled deletions.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { claimDue, processTask, runAsWorker } from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

async function seed(files: number): Promise<{ accountId: number; fileIds: number[] }> {
  const accountId = (
    await db.query(
      `insert into accounts.account (email) values ('x' || random() || '@example.com') returning account_id::int`,
    )
  ).rows[0].account_id as number;
  const fileIds: number[] = [];
  for (let i = 0; i < files; i++) {
    fileIds.push(
      (
        await db.query(
          `insert into files.file (account_id, bucket, object_key) values ($1, 'recordings', $2) returning file_id::int`,
          [accountId, `a/${accountId}/${i}`],
        )
      ).rows[0].file_id as number,
    );
  }
  return { accountId, fileIds };
}

/**
 * Plays the worker until nothing is due: db_function tasks run; file_delete tasks of the
 * files in `dead` are claimed and never finished (the worker dies), others succeed.
 */
async function run(dead: Set<number>, onDelete?: (fileId: number) => void) {
  let clock = new Date(Date.now() + 1000);
  for (let i = 0; i < 400; i++) {
    const tasks = await claimDue(db, clock);
    if (tasks.length === 0 && i > 0) {
      const next = await db.query(`select min(available_at) as at from queues.task_pending`);
      if (!next.rows[0].at) break;
    }
    tasks.sort((a, b) => Number(a.task_type === 'db_function') - Number(b.task_type === 'db_function'));
    for (const task of tasks) {
      // The worker dies with it: its lease expires.
      if (task.task_type === 'file_delete' && dead.has(Number(task.payload.file_id))) continue;
      await processTask(db, task, (t) => {
        onDelete?.(Number(t.payload.file_id));
        return { ok: true, worker_payload: {} };
      });
    }
    clock = new Date(clock.getTime() + 20 * 60 * 1000);
  }
}

describe('file_delete tasks the queue gave up on', () => {
  it('fail their attempts; the deletion gets stuck and the account deletion fails naming the file', async () => {
    const { accountId, fileIds } = await seed(2);
    const [stuckFile, okFile] = fileIds;
    const { rows } = await db
      .pool('app')
      .query('select account_deletion_task_id::int as id from api.request_account_deletion($1)', [accountId]);
    await run(new Set([stuckFile]));
    const failed = await db.query(
      `select f.error_message from files.file_deletion_attempt a
         join files.file_deletion_task t using (file_deletion_task_id)
         join files.file_deletion_attempt_failed f using (file_deletion_attempt_id)
        where t.file_id = $1 order by a.file_deletion_attempt_id`,
      [stuckFile],
    );
    expect(failed.rows.length).toBe(5);
    for (const r of failed.rows)
      expect(r.error_message).toMatch(/^the queue gave up on file_delete task \d+ \(abandoned\)/);
    expect((await db.query('select files.is_file_deletion_stuck($1) as s', [stuckFile])).rows[0].s).toBe(true);
    expect((await db.query('select files.is_file_deleted($1) as d', [okFile])).rows[0].d).toBe(true);
    const { rows: outcome } = await db.query(
      'select reason from accounts.account_deletion_task_failed where account_deletion_task_id = $1',
      [rows[0].id],
    );
    expect(outcome).toEqual([{ reason: `file deletion stuck for file_id ${stuckFile}` }]);
  });
});

describe('ended processes delete nothing', () => {
  it('a file whose account deletion failed is not deleted by an attempt still queued, and the files service may not sign it', async () => {
    const { accountId, fileIds } = await seed(1);
    const [fileId] = fileIds;
    const { rows } = await db
      .pool('app')
      .query('select file_deletion_task_id::int as id from files.kickoff_file_deletion($1)', [fileId]);
    // The supervisor runs and schedules the attempt.
    const clock = new Date(Date.now() + 1000);
    for (const t of (await claimDue(db, clock)).filter((t) => t.task_type === 'db_function')) await processTask(db, t);
    const check = async (object_key: string) =>
      (await runAsWorker(db, 'files.check_file_delete_signing', { bucket: 'recordings', object_key })) as {
        payload: { scheduled: boolean };
      };
    const signable = async () => (await check(`a/${accountId}/0`)).payload.scheduled;
    // Queued, no worker performs it yet: nothing to sign. A worker claims it: signable.
    expect(await signable()).toBe(false);
    const [task] = (await claimDue(db, new Date(clock.getTime() + 1000))).filter(
      (t) => t.task_type === 'file_delete' && t.payload.file_id === fileId,
    );
    expect(await signable()).toBe(true);
    expect((await check('a/other')).payload.scheduled).toBe(false);
    expect(await runAsWorker(db, 'files.check_file_delete_signing', { bucket: 'recordings' })).toEqual({
      success: false,
      validation_failure_message: 'bucket and object_key must be strings',
    });
    // Meanwhile the account's deletion ended in failure.
    const del = await db.query(
      `insert into accounts.account_deletion_task (account_id) values ($1) returning account_deletion_task_id`,
      [accountId],
    );
    await db.query(
      `insert into accounts.account_deletion_task_failed (account_deletion_task_id, reason) values ($1, 'file deletion stuck for file_id 0')`,
      [del.rows[0].account_deletion_task_id],
    );
    expect(await signable()).toBe(false);
    let called = 0;
    const done = await processTask(db, task, () => {
      called++;
      return { ok: true };
    });
    expect(called).toBe(0);
    expect(done.result).toEqual({
      success: false,
      validation_failure_message: `the deletion of account ${accountId} failed; not deleting file ${fileId} for attempt ${String(task.payload.file_deletion_attempt_id)}`,
    });
    expect((await db.query('select files.is_file_deleted($1) as d', [fileId])).rows[0].d).toBe(false);
    expect(rows[0].id).toBeGreaterThan(0);
  });

  it('the app and API roles may not ask whether a deletion is scheduled', async () => {
    for (const dbUser of ['app', 'api'] as const) {
      await expect(db.pool(dbUser).query(`select files.check_file_delete_signing('{}')`)).rejects.toMatchObject({
        code: '42501',
      });
      await expect(
        db.pool(dbUser).query(`select files.is_file_delete_scheduled('recordings', 'x')`),
      ).rejects.toMatchObject({ code: '42501' });
    }
  });
});
