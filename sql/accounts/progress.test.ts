// A process root's progress from its facts (sql/accounts/progress.sql): an account
// deletion shows files deleted out of files on its process-tree node.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { drive } from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** An account with a profile, a cue and `recordings` uploaded recordings (files). */
async function seedAccount(recordings = 2): Promise<{ accountId: number; fileIds: number[] }> {
  const { rows } = await db.query(
    `insert into accounts.account (email, display_name) values ('u' || random() || '@example.com', 'Ada') returning account_id::int`,
  );
  const accountId = rows[0].account_id as number;
  const profileId = (
    await db.query(
      `insert into learning.profile (account_id, display_name) values ($1, 'Ada L.') returning profile_id`,
      [accountId],
    )
  ).rows[0].profile_id;
  const cueId = (await db.query(`insert into learning.cue (prompt) values ('Say hello') returning cue_id`)).rows[0]
    .cue_id;
  const fileIds: number[] = [];
  for (let i = 0; i < recordings; i++) {
    const fileId = (
      await db.query(
        `insert into files.file (account_id, bucket, object_key) values ($1, 'recordings', $2) returning file_id::int`,
        [accountId, `accounts/${accountId}/rec-${i}.webm`],
      )
    ).rows[0].file_id as number;
    await db.query(`insert into learning.profile_cue_recording (profile_id, cue_id, file_id) values ($1, $2, $3)`, [
      profileId,
      cueId,
      fileId,
    ]);
    fileIds.push(fileId);
  }
  return { accountId, fileIds };
}

const progress = async (taskId: number) =>
  (await db.pool('api').query(`select admin.process_tree('account_deletion', $1) -> 'progress' as p`, [taskId])).rows[0]
    .p as unknown;

it('an account deletion shows files deleted out of files, from its facts', async () => {
  const { accountId } = await seedAccount(3);
  const { rows } = await db
    .pool('app')
    .query('select account_deletion_task_id::int as id from api.request_account_deletion($1)', [accountId]);
  const taskId = rows[0].id as number;
  expect(await progress(taskId)).toEqual({ done: 0, total: 3, note: 'file deletions not started' });
  await drive(db);
  expect(await progress(taskId)).toEqual({ done: 3, total: 3, note: 'files deleted' });
  // A process that defines no progress function has none.
  const { rows: files } = await db.query(
    `select d.file_deletion_task_id::int as id from files.file_deletion_task d join files.file f using (file_id)
      where f.account_id = $1 limit 1`,
    [accountId],
  );
  const node = await db.pool('api').query(`select admin.process_tree('file_deletion', $1) as t`, [files[0].id]);
  expect(node.rows[0].t).toMatchObject({ progress: null });
});
