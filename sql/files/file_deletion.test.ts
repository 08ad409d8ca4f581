// The file deletion process, with the worker played by hand: happy path (the object is
// deleted, the file marked deleted), the stuck path (every deletion fails until the
// maximum), kickoff validation, redelivery and the provider payload (fileDeletePayload).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { fileDeletePayload } from '@org/contracts';
import { drive, pendingFor, rowCounts, runAsWorker, snapshot } from '../test-support/drive.ts';

let db: TestDatabase;
let accountId: number;
beforeAll(async () => {
  db = await createTestDatabase();
  accountId = (
    await db.query(`insert into accounts.account (email) values ('f@example.com') returning account_id::int`)
  ).rows[0].account_id;
});
afterAll(async () => {
  await db?.drop();
});

const newFile = async (key = 'recordings/a.webm') =>
  (
    await db.query(
      `insert into files.file (account_id, bucket, object_key) values ($1, 'user-uploads', $2) returning file_id::int`,
      [accountId, key],
    )
  ).rows[0].file_id as number;
const kickoff = async (fileId: unknown) =>
  (
    await db
      .pool('app')
      .query('select file_deletion_task_id::int, validation_failure_message from files.kickoff_file_deletion($1)', [
        fileId,
      ])
  ).rows[0];
const stuck = async (fileId: number) =>
  (await db.query('select files.is_file_deletion_stuck($1) as stuck', [fileId])).rows[0].stuck as boolean;

describe('file deletion', () => {
  it('happy path: one file_delete task, attempt succeeded, file_metadata says deleted', async () => {
    const fileId = await newFile();
    await db.query(
      `insert into files.file_metadata (file_id, metadata) values ($1, '{"content_type": "audio/webm"}')`,
      [fileId],
    );
    const { file_deletion_task_id: taskId } = await kickoff(fileId);
    const { processed } = await drive(db, { rootKey: 'file_deletion_task_id', rootId: taskId });
    const deletes = processed.filter((p) => p.task.task_type === 'file_delete');
    expect(deletes).toHaveLength(1);
    expect(deletes[0].task.payload).toMatchObject({
      task_type: 'file_delete',
      file_id: fileId,
      before_handler: 'files.get_file_delete_payload',
      success_handler: 'files.record_file_delete_success',
      error_handler: 'files.record_file_delete_failure',
    });
    const providerPayload = deletes[0].result.payload;
    expect(fileDeletePayload.safeParse(providerPayload).success).toBe(true);
    expect(providerPayload).toEqual({
      file_id: fileId,
      idempotency_key: String(deletes[0].task.payload.file_deletion_attempt_id),
      bucket: 'user-uploads',
      object_key: 'recordings/a.webm',
    });
    const { rows } = await db.query('select files.current_file_metadata($1) as m', [fileId]);
    expect(rows[0].m).toMatchObject({ content_type: 'audio/webm', deleted: true });
    expect(
      (await db.query('select 1 from files.file_deletion_task_succeeded where file_deletion_task_id = $1', [taskId]))
        .rowCount,
    ).toBe(1);
    expect(await stuck(fileId)).toBe(false);
    expect(await pendingFor(db, 'file_deletion_task_id', taskId)).toEqual([]);
  });

  it('stuck path: failures accumulate to the maximum, is_file_deletion_stuck turns true, the task fails', async () => {
    const fileId = await newFile('recordings/b.webm');
    const { file_deletion_task_id: taskId } = await kickoff(fileId);
    const { processed } = await drive(db, {
      rootKey: 'file_deletion_task_id',
      rootId: taskId,
      provider: () => ({ ok: false, error: 'storage: 403 bucket not accessible' }),
    });
    expect(processed.filter((p) => p.task.task_type === 'file_delete')).toHaveLength(5);
    const { rows } = await db.query(
      `select count(*)::int as n from files.file_deletion_attempt_failed f
         join files.file_deletion_attempt a using (file_deletion_attempt_id) where a.file_deletion_task_id = $1`,
      [taskId],
    );
    expect(rows[0].n).toBe(5);
    expect(await stuck(fileId)).toBe(true);
    expect(
      (await db.query('select reason from files.file_deletion_task_failed where file_deletion_task_id = $1', [taskId]))
        .rows,
    ).toEqual([{ reason: 'max_attempts_reached' }]);
    expect((await db.query('select files.is_file_deleted($1) as d', [fileId])).rows[0].d).toBe(false);
    expect(await pendingFor(db, 'file_deletion_task_id', taskId)).toEqual([]);
  });

  it('kickoff: missing or unknown file ids return a message and write nothing; a second kickoff is a no-op', async () => {
    const before = await rowCounts(db, ['files', 'queues']);
    expect(await kickoff(null)).toEqual({
      file_deletion_task_id: null,
      validation_failure_message: 'file_id is required',
    });
    expect(await kickoff(777777)).toEqual({
      file_deletion_task_id: null,
      validation_failure_message: 'file 777777 not found',
    });
    expect(await rowCounts(db, ['files', 'queues'])).toEqual(before);

    const fileId = await newFile('recordings/c.webm');
    const first = await kickoff(fileId);
    const after = await rowCounts(db, ['files', 'queues']);
    expect(await kickoff(fileId)).toEqual(first);
    expect(await rowCounts(db, ['files', 'queues'])).toEqual(after);
    await drive(db);
  });

  it('a file_delete task delivered twice leaves the facts (and metadata) exactly as one delivery does', async () => {
    const fileId = await newFile('recordings/d.webm');
    const { file_deletion_task_id: taskId } = await kickoff(fileId);
    const { processed } = await drive(db, { rootKey: 'file_deletion_task_id', rootId: taskId });
    const task = processed.find((p) => p.task.task_type === 'file_delete')!.task;
    const tables = [
      'files.file_deletion_attempt',
      'files.file_deletion_attempt_succeeded',
      'files.file_deletion_attempt_failed',
      'files.file_metadata',
    ];
    const once = await snapshot(db, tables);
    expect(await runAsWorker(db, 'files.get_file_delete_payload', task.payload)).toMatchObject({ success: false });
    expect(
      await runAsWorker(db, 'files.record_file_delete_success', { original_payload: task.payload, worker_payload: {} }),
    ).toEqual({
      success: true,
    });
    expect(
      await runAsWorker(db, 'files.record_file_delete_failure', { original_payload: task.payload, error: 'late' }),
    ).toEqual({
      success: true,
    });
    expect(await snapshot(db, tables)).toEqual(once);
  });

  it('the supervisor refuses REPEATABLE READ and bad payloads', async () => {
    expect(await runAsWorker(db, 'files.file_deletion_supervisor', { file_deletion_task_id: -1 })).toEqual({
      success: false,
      validation_failure_message: 'file_deletion_task_id must be a positive integer',
    });
    const client = await db.client('worker');
    try {
      await client.query('begin isolation level repeatable read');
      await expect(
        client.query(`select internal.run_function('files.file_deletion_supervisor', '{"file_deletion_task_id": 1}')`),
      ).rejects.toMatchObject({
        code: '25000',
        message: 'files.file_deletion_supervisor must run under READ COMMITTED, not REPEATABLE READ',
      });
      await client.query('rollback');
    } finally {
      await client.end();
    }
  });
});
