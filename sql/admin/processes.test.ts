// The process view, as the API role: an account deletion's timeline with its children
// (the file deletions it starts), and bad input.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/db-tools/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** Runs every ready db_function task as the worker would (run_function, then complete). */
async function runSupervisors(): Promise<number> {
  const worker = db.pool('worker');
  const { rows } = await worker.query<{ task_id: string; task_lease_id: string; payload: { db_function: string } }>(
    `select task_id, task_lease_id, payload from queues.claim_tasks('w-proc', 100, '{db_function}', 60)`,
  );
  for (const t of rows) {
    await worker.query('select internal.run_function($1, $2)', [t.payload.db_function, t.payload]);
    await worker.query('select queues.complete_task($1, $2, null)', [t.task_id, t.task_lease_id]);
  }
  return rows.length;
}

it('an account deletion shows its own facts and its children’s, oldest first per root', async () => {
  const {
    rows: [account],
  } = await db.query<{ account_id: string }>(
    `insert into accounts.account (email, display_name) values ('a@example.com', 'A') returning account_id`,
  );
  await db.query(`insert into files.file (account_id, bucket, object_key) values ($1, 'bucket-one', 'k/1')`, [
    account.account_id,
  ]);
  const {
    rows: [kick],
  } = await db
    .pool('app')
    .query<{ account_deletion_task_id: string }>('select * from api.request_account_deletion($1)', [
      account.account_id,
    ]);
  await runSupervisors();
  await runSupervisors();

  const api = db.pool('api');
  const { rows } = await api.query<{ process: string; fact: string; root_id: string; detail: Record<string, unknown> }>(
    `select * from admin.process_timeline('account_deletion', $1)`,
    [kick.account_deletion_task_id],
  );
  const own = rows.filter((r) => r.process === 'account_deletion');
  expect(own[0]).toMatchObject({
    fact: 'started',
    root_id: kick.account_deletion_task_id,
    detail: { account_id: Number(account.account_id) },
  });
  expect(own.map((r) => r.fact)).toContain('supervisor_run');
  const children = new Set(rows.filter((r) => r.process !== 'account_deletion').map((r) => r.process));
  expect(children.has('file_deletion')).toBe(true);
  expect(rows.find((r) => r.process === 'file_deletion' && r.fact === 'attempt')).toBeDefined();

  const { rows: roots } = await api.query(`select * from admin.list_process_roots('account_deletion', null, null)`);
  expect(roots).toEqual([expect.objectContaining({ root_id: kick.account_deletion_task_id, status: 'running' })]);
});

it('refuses an unknown process (22023), a missing root (23503) and nulls (22004)', async () => {
  const api = db.pool('api');
  await expect(api.query(`select * from admin.process_timeline('payroll', 1)`)).rejects.toMatchObject({
    code: '22023',
    message: expect.stringMatching(/^unknown process 'payroll'; expected one of /),
  });
  await expect(api.query(`select * from admin.process_timeline('send_sms', 424242)`)).rejects.toMatchObject({
    code: '23503',
    message: 'send_sms 424242 does not exist',
  });
  await expect(api.query(`select * from admin.process_timeline(null, 1)`)).rejects.toMatchObject({ code: '22004' });
  await expect(api.query(`select * from admin.list_process_roots('send_sms', 0, null)`)).rejects.toMatchObject({
    code: '22023',
    message: 'limit must be between 1 and 500, got 0',
  });
});
