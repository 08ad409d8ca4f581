// The process view, as the API role: an account deletion's timeline with its children
// (the file deletions it starts), bad input, and a finished process whose queue tasks
// retention dropped (its facts stay; the timeline names the dropped tasks).
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

it('a finished process whose queue tasks retention dropped: its facts stay, and the timeline says which tasks went and when', async () => {
  // Finish what the tests above started, then give the process a partition set of its own.
  await drive(db);
  const { rows: top } = await db.query(
    `select max(upper_bound) as top from queues.history_partitions() where not is_default`,
  );
  const base = Number(top[0].top);
  await db.query(`update queues.history_setting set partition_size = 10`);
  await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [base - 1]);
  await db.query('select queues.maintain_history_at(now())');
  const {
    rows: [sent],
  } = await db
    .pool('app')
    .query<{ send_email_task_id: string }>(
      `select send_email_task_id from comms.send_email('from@example.com', 'to@example.com', 'Hi', '<p>hi</p>')`,
    );
  const rootId = sent.send_email_task_id;
  await drive(db, { rootKey: 'send_email_task_id', rootId });

  const api = db.pool('api');
  type Fact = { at: Date; process: string; fact: string; attempt_id: string | null; detail: Record<string, unknown> };
  const timeline = async () =>
    (await api.query<Fact>(`select * from admin.process_timeline('send_email', $1)`, [rootId])).rows;
  const before = await timeline();
  expect(before.map((f) => f.fact)).toEqual(
    expect.arrayContaining(['started', 'attempt', 'attempt_succeeded', 'succeeded']),
  );
  expect(before.some((f) => f.fact === 'queue_history_pruned')).toBe(false);
  const taskId = Number(before.find((f) => f.fact === 'attempt')!.detail.task_id);
  expect(taskId).toBeGreaterThanOrEqual(base);
  expect(taskId).toBeLessThan(base + 10);
  await expect(api.query('select admin.get_task($1)', [taskId])).resolves.toBeDefined();

  // Every task of the set is completed: past the window, retention drops the set.
  await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [base + 10]);
  const { rows: ran } = await db.query(`select queues.maintain_history_at(now() + interval '8 days') as r`);
  expect(ran[0].r.dropped).toContainEqual([base, base + 10]);
  await expect(api.query('select admin.get_task($1)', [taskId])).rejects.toMatchObject({ code: '23503' });

  const after = await timeline();
  // What the process recorded is all there, in the same order; one row says what went.
  expect(after.filter((f) => f.fact !== 'queue_history_pruned')).toEqual(before);
  const pruned = after.filter((f) => f.fact === 'queue_history_pruned');
  const { rows: drop } = await db.query(
    `select dropped_at, jsonb_build_object('dropped_at', dropped_at, 'last_completed_at', last_completed_at) as json
       from queues.history_partition_dropped where lower_bound = $1`,
    [base],
  );
  expect(pruned).toEqual([
    {
      at: drop[0].dropped_at,
      process: 'send_email',
      root_id: rootId,
      fact: 'queue_history_pruned',
      attempt_id: null,
      detail: {
        task_ids: [taskId],
        lower_bound: base,
        upper_bound: base + 10,
        ...drop[0].json,
      },
    },
  ]);
  expect(after.at(-1)!.fact).toBe('queue_history_pruned'); // the drop came last
  // The tree still answers from the process's own facts.
  const { rows: tree } = await api.query(`select admin.process_tree('send_email', $1) as t`, [rootId]);
  expect(tree[0].t).toMatchObject({ status: 'succeeded', attempts: 1 });
});
