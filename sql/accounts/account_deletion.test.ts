// The account deletion supervision tree (the seeds' "Example checklist"): the happy path
// (every file deleted and marked, the account anonymized, the root succeeded), the file
// deletion stuck path and the anonymization stuck path, plus the api's validation.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { drive, rowCounts, runAsWorker } from '../test-support/drive.ts';

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

const requestDeletion = async (accountId: unknown) =>
  (
    await db
      .pool('app')
      .query('select account_deletion_task_id::int, validation_failure_message from api.request_account_deletion($1)', [
        accountId,
      ])
  ).rows[0];
const flags = async (accountId: number) =>
  (await db.query('select flag from accounts.account_flag where account_id = $1 order by flag', [accountId])).rows.map(
    (r) => r.flag,
  );
const deletionOutcome = async (taskId: number) => {
  const ok = await db.query(
    'select 1 from accounts.account_deletion_task_succeeded where account_deletion_task_id = $1',
    [taskId],
  );
  const failed = await db.query(
    'select reason from accounts.account_deletion_task_failed where account_deletion_task_id = $1',
    [taskId],
  );
  return { succeeded: ok.rowCount === 1, failure: failed.rows[0]?.reason as string | undefined };
};

describe('account deletion', () => {
  it('happy path: every file deleted and marked, anonymized, root succeeded', async () => {
    const { accountId, fileIds } = await seedAccount(3);
    const { account_deletion_task_id: taskId, validation_failure_message } = await requestDeletion(accountId);
    expect(validation_failure_message).toBeNull();
    expect(await flags(accountId)).toEqual(['deleted']);
    expect(
      (
        await db.query('select count(*)::int as n from accounts.account_deletion_task where account_id = $1', [
          accountId,
        ])
      ).rows[0].n,
    ).toBe(1);

    await drive(db);

    for (const fileId of fileIds) {
      const { rows } = await db.query(
        `select exists (select 1 from files.file_deletion_task t join files.file_deletion_task_succeeded s using (file_deletion_task_id)
                         where t.file_id = $1) as deleted,
                exists (select 1 from files.file_metadata m where m.file_id = $1 and m.metadata @> '{"deleted": true}') as marked`,
        [fileId],
      );
      expect(rows[0]).toEqual({ deleted: true, marked: true });
    }
    expect(
      (
        await db.query('select count(*)::int as n from accounts.account_anonymization_task where account_id = $1', [
          accountId,
        ])
      ).rows[0].n,
    ).toBe(1);
    expect(await flags(accountId)).toEqual(['anonymized', 'deleted']);
    expect(
      (await db.query('select email, display_name from accounts.account where account_id = $1', [accountId])).rows[0],
    ).toEqual({
      email: null,
      display_name: null,
    });
    expect(
      (await db.query('select display_name from learning.profile where account_id = $1', [accountId])).rows[0]
        .display_name,
    ).toBeNull();
    expect(await deletionOutcome(taskId)).toEqual({ succeeded: true, failure: undefined });
    // Nothing left to run for this account.
    const { rows } = await db.query(`select count(*)::int as n from queues.task_pending`);
    expect(rows[0].n).toBe(0);
  });

  it('file deletion stuck: the root fails with a message naming the file and stops', async () => {
    const { accountId, fileIds } = await seedAccount(2);
    const { account_deletion_task_id: taskId } = await requestDeletion(accountId);
    await drive(db, {
      // Storage refuses the second file every time.
      provider: (task) =>
        task.payload.file_id === fileIds[1] ? { ok: false, error: 'storage: invalid bucket' } : { ok: true },
    });
    expect(
      (await db.query('select files.is_file_deletion_stuck($1) as a, files.is_file_deletion_stuck($2) as b', fileIds))
        .rows[0],
    ).toEqual({ a: false, b: true });
    const { rows: failures } = await db.query(
      `select count(*)::int as n from files.file_deletion_attempt_failed f join files.file_deletion_attempt a using (file_deletion_attempt_id)
         join files.file_deletion_task t using (file_deletion_task_id) where t.file_id = $1`,
      [fileIds[1]],
    );
    expect(failures[0].n).toBe(5);
    expect(await deletionOutcome(taskId)).toEqual({
      succeeded: false,
      failure: `file deletion stuck for file_id ${fileIds[1]}`,
    });
    // Anonymization never started; the supervisor stopped (no pending tasks).
    expect(await flags(accountId)).toEqual(['deleted']);
    expect((await db.query('select count(*)::int as n from queues.task_pending')).rows[0].n).toBe(0);
  });

  it('anonymization stuck: failures accumulate, is_account_anonymization_stuck turns true, the root fails', async () => {
    const { accountId } = await seedAccount(1);
    await db.query(
      `insert into accounts.anonymization_failure_injection (account_id, error_message) values ($1, 'injected for the test')`,
      [accountId],
    );
    const { account_deletion_task_id: taskId } = await requestDeletion(accountId);
    await drive(db);
    const { rows } = await db.query(
      `select f.error_message from accounts.account_anonymization_attempt_failed f
         join accounts.account_anonymization_attempt a using (account_anonymization_attempt_id)
         join accounts.account_anonymization_task t using (account_anonymization_task_id)
        where t.account_id = $1`,
      [accountId],
    );
    expect(rows).toHaveLength(3);
    expect(rows[0].error_message).toBe(`anonymization of account ${accountId} failed: injected for the test`);
    expect((await db.query('select accounts.is_account_anonymization_stuck($1) as s', [accountId])).rows[0].s).toBe(
      true,
    );
    expect(await deletionOutcome(taskId)).toEqual({
      succeeded: false,
      failure: `account anonymization stuck for account_id ${accountId}`,
    });
    // Each failed attempt was rolled back: the personal data is untouched, no flag.
    expect(await flags(accountId)).toEqual(['deleted']);
    expect(
      (await db.query('select display_name from accounts.account where account_id = $1', [accountId])).rows[0]
        .display_name,
    ).toBe('Ada');
    expect((await db.query('select count(*)::int as n from queues.task_pending')).rows[0].n).toBe(0);
  });

  it('an account with no files goes straight to anonymization', async () => {
    const { accountId } = await seedAccount(0);
    const { account_deletion_task_id: taskId } = await requestDeletion(accountId);
    await drive(db);
    expect(await deletionOutcome(taskId)).toEqual({ succeeded: true, failure: undefined });
  });
});

describe('api.request_account_deletion', () => {
  it('unknown or missing ids return a validation_failure_message and write nothing', async () => {
    const before = await rowCounts(db, ['accounts', 'files', 'queues']);
    expect(await requestDeletion(null)).toEqual({
      account_deletion_task_id: null,
      validation_failure_message: 'account_id is required',
    });
    expect(await requestDeletion(99999999)).toEqual({
      account_deletion_task_id: null,
      validation_failure_message: 'account 99999999 not found',
    });
    expect(await rowCounts(db, ['accounts', 'files', 'queues'])).toEqual(before);
  });

  it('a second request for the same account is a no-op', async () => {
    const { accountId } = await seedAccount(1);
    const first = await requestDeletion(accountId);
    const before = await rowCounts(db, ['accounts', 'files', 'queues']);
    expect(await requestDeletion(accountId)).toEqual(first);
    expect(await rowCounts(db, ['accounts', 'files', 'queues'])).toEqual(before);
    await drive(db);
  });

  it('the supervisors refuse REPEATABLE READ and bad payloads; the worker cannot call the api', async () => {
    expect(await runAsWorker(db, 'accounts.account_deletion_supervisor', {})).toMatchObject({ success: false });
    expect(
      await runAsWorker(db, 'accounts.account_anonymization_supervisor', { account_anonymization_task_id: 5e20 }),
    ).toMatchObject({
      success: false,
    });
    for (const fn of ['accounts.account_deletion_supervisor', 'accounts.account_anonymization_supervisor']) {
      const client = await db.client('worker');
      try {
        await client.query('begin isolation level repeatable read');
        await expect(client.query(`select internal.run_function($1, '{}')`, [fn])).resolves.toBeDefined();
        await client.query('rollback');
        await client.query('begin isolation level repeatable read');
        await expect(
          client.query(`select internal.run_function($1, $2)`, [
            fn,
            JSON.stringify({ account_deletion_task_id: 1, account_anonymization_task_id: 1 }),
          ]),
        ).rejects.toMatchObject({ code: '25000' });
        await client.query('rollback');
      } finally {
        await client.end();
      }
    }
    await expect(db.pool('worker').query('select api.request_account_deletion(1)')).rejects.toMatchObject({
      code: '42501',
    });
  });
});
