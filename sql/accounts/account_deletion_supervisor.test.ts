// The account deletion supervisor run by run, as the worker calls it: the status of each
// step (children's facts written by hand), the failure envelope and the run cap.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { rowCounts, runAsWorker } from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** An account with one file, and its deletion requested as the app. */
async function requested(): Promise<{ accountId: number; fileId: number; id: number }> {
  const accountId = (
    await db.query(
      `insert into accounts.account (email, display_name) values ('u' || random() || '@example.com', 'Ada') returning account_id::int`,
    )
  ).rows[0].account_id as number;
  const fileId = (
    await db.query(
      `insert into files.file (account_id, bucket, object_key) values ($1::bigint, 'recordings', 'accounts/' || $1::text || '/rec.webm') returning file_id::int`,
      [accountId],
    )
  ).rows[0].file_id as number;
  const { rows } = await db
    .pool('app')
    .query('select account_deletion_task_id::int as id from api.request_account_deletion($1)', [accountId]);
  return { accountId, fileId, id: rows[0].id as number };
}
const supervise = (id: number) =>
  runAsWorker(db, 'accounts.account_deletion_supervisor', { account_deletion_task_id: id });
const progress = (status: string) => ({ success: true, payload: { status, next_check_at: expect.any(String) } });

describe('accounts.account_deletion_supervisor', () => {
  it('files first, then anonymization, then succeeded', async () => {
    const { accountId, fileId, id } = await requested();
    expect(await supervise(id)).toEqual(progress('file_deletions_started'));
    expect((await db.query('select 1 from files.file_deletion_task where file_id = $1', [fileId])).rowCount).toBe(1);
    expect(await supervise(id)).toEqual(progress('waiting_for_file_deletions'));
    await db.query(
      `insert into files.file_deletion_task_succeeded (file_deletion_task_id)
       select file_deletion_task_id from files.file_deletion_task where file_id = $1`,
      [fileId],
    );
    expect(await supervise(id)).toEqual(progress('anonymization_started'));
    expect(await supervise(id)).toEqual(progress('waiting_for_anonymization'));
    await db.query(
      `insert into accounts.account_anonymization_task_succeeded (account_anonymization_task_id)
       select account_anonymization_task_id from accounts.account_anonymization_task where account_id = $1`,
      [accountId],
    );
    expect(await supervise(id)).toEqual({ success: true, payload: { status: 'succeeded' } });
    const before = await rowCounts(db, ['accounts', 'files', 'queues']);
    expect(await supervise(id)).toEqual({ success: true, payload: { status: 'succeeded' } });
    expect(await rowCounts(db, ['accounts', 'files', 'queues'])).toEqual(before);
    expect(
      (
        await db.query(
          'select count(*)::int as n from accounts.account_deletion_supervisor_run where account_deletion_task_id = $1',
          [id],
        )
      ).rows[0].n,
    ).toBe(4);
  });

  it('the run cap ends it with run_limit_reached, and a failed process reports its reason', async () => {
    const { id } = await requested();
    await db.query(
      'insert into accounts.account_deletion_supervisor_run (account_deletion_task_id) select $1 from generate_series(1, 100)',
      [id],
    );
    const failed = { status: 'failed', payload: { reason: 'run_limit_reached after 100 runs' } };
    expect(await supervise(id)).toEqual(failed);
    const before = await rowCounts(db, ['accounts', 'files', 'queues']);
    expect(await supervise(id)).toEqual(failed);
    expect(await rowCounts(db, ['accounts', 'files', 'queues'])).toEqual(before);
  });

  it('bad payloads and unknown roots are validation failures', async () => {
    expect(await runAsWorker(db, 'accounts.account_deletion_supervisor', { account_deletion_task_id: 'x' })).toEqual({
      success: false,
      validation_failure_message: 'account_deletion_task_id must be a positive integer',
    });
    expect(await supervise(99999999)).toEqual({
      success: false,
      validation_failure_message: 'account_deletion_task 99999999 not found',
    });
  });
});
