// Business facts and retention: the domains keep working when the queue's old partition
// sets are gone, and each domain's retention function (off by default) prunes its own
// finished processes, which the process timeline then reports as pruned.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { drive } from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

async function sendEmail(to: string): Promise<number> {
  const { rows } = await db
    .pool('app')
    .query(
      `select send_email_task_id::int as id from comms.send_email('Team <team@example.com>', $1, 'Hello', '<p>Hi</p>', null, null, null, null)`,
      [to],
    );
  return rows[0].id;
}
async function sendSms(): Promise<number> {
  const { rows } = await db
    .pool('app')
    .query(`select send_sms_task_id::int as id from comms.send_sms('+15551234567', 'Hi', null, null, null)`);
  return rows[0].id;
}
async function deleteAccount(): Promise<{ deletion: number; account: number }> {
  const { rows } = await db.query(
    `insert into accounts.account (email, display_name) values ('x@example.com', 'X') returning account_id::int as id`,
  );
  const account = rows[0].id;
  await db.query(`insert into files.file (account_id, bucket, object_key) values ($1, 'recordings', 'a/1.webm')`, [
    account,
  ]);
  const { rows: d } = await db
    .pool('app')
    .query('select account_deletion_task_id::int as id from api.request_account_deletion($1)', [account]);
  return { deletion: d[0].id, account };
}
const timeline = async (process: string, id: number) =>
  (await db.pool('api').query('select fact, detail from admin.process_timeline($1, $2)', [process, id])).rows;
const prune = async (domain: string, at: string) =>
  (await db.query(`select ${domain}.prune_finished_processes_at(${at}, 1000) as r`)).rows[0].r;
const count = async (sql: string, params: unknown[] = []) => Number((await db.query(sql, params)).rows[0].n);

describe('business facts and retention', () => {
  let email: number;
  let sms: number;
  let deletion: { deletion: number; account: number };

  it('processes finish, and their timelines survive the queue dropping its partition sets', async () => {
    email = await sendEmail('ada@example.com');
    sms = await sendSms();
    deletion = await deleteAccount();
    await drive(db);
    expect(
      await count('select count(*) as n from comms.send_email_task_succeeded where send_email_task_id = $1', [email]),
    ).toBe(1);
    expect(
      await count('select count(*) as n from comms.send_sms_task_succeeded where send_sms_task_id = $1', [sms]),
    ).toBe(1);
    expect(
      await count(
        'select count(*) as n from accounts.account_deletion_task_succeeded where account_deletion_task_id = $1',
        [deletion.deletion],
      ),
    ).toBe(1);
    const before = await timeline('send_email', email);
    const beforeDeletion = await timeline('account_deletion', deletion.deletion);

    // Every queue task is done; sets move on and the queue drops every old one.
    const { rows } = await db.query(
      `select max(upper_bound) as top from queues.history_partitions() where not is_default`,
    );
    await db.query(`select setval(pg_get_serial_sequence('queues.task', 'task_id'), $1)`, [Number(rows[0].top) + 5]);
    await db.query(`update queues.history_setting set retention = interval '0'`);
    const result = (await db.query('select queues.maintain_history_at(now()) as r')).rows[0].r;
    expect(result.dropped.length).toBeGreaterThan(0);
    expect(await count('select count(*) as n from queues.task')).toBe(0);

    // The domains' timelines keep every fact, plus one row per dropped set that held
    // queue tasks their attempts name; and a new process runs end to end.
    const queueTaskIds = async (table: string, key: string, id: number) =>
      (await db.query(`select task_id::int as id from ${table} where ${key} = $1 order by 1`, [id])).rows.map(
        (r) => r.id,
      );
    const pruned = (rows: { fact: string; detail: { task_ids?: number[] } }[]) =>
      rows.filter((r) => r.fact === 'queue_history_pruned').flatMap((r) => r.detail.task_ids);
    const after = await timeline('send_email', email);
    expect(after.filter((r) => r.fact !== 'queue_history_pruned')).toEqual(before);
    expect(pruned(after)).toEqual(await queueTaskIds('comms.send_email_attempt', 'send_email_task_id', email));
    const afterDeletion = await timeline('account_deletion', deletion.deletion);
    expect(afterDeletion.filter((r) => r.fact !== 'queue_history_pruned')).toEqual(beforeDeletion);
    const fileDeletions = (
      await db.query(
        `select fd.file_deletion_task_id::int as id from files.file_deletion_task fd join files.file f using (file_id)
          where f.account_id = $1`,
        [deletion.account],
      )
    ).rows;
    expect(fileDeletions).toHaveLength(1);
    expect(pruned(afterDeletion)).toEqual(
      await queueTaskIds('files.file_deletion_attempt', 'file_deletion_task_id', fileDeletions[0].id),
    );
    expect(pruned(afterDeletion).length).toBeGreaterThan(0);
    const next = await sendEmail('grace@example.com');
    await drive(db);
    expect(
      await count('select count(*) as n from comms.send_email_task_succeeded where send_email_task_id = $1', [next]),
    ).toBe(1);
  });

  it('is off by default: nothing is pruned, however old', async () => {
    expect(await prune('comms', "now() + interval '10 years'")).toEqual({ send_email: 0, send_sms: 0 });
    expect(await prune('files', "now() + interval '10 years'")).toEqual({ file_deletion: 0 });
    expect(await prune('accounts', "now() + interval '10 years'")).toEqual({
      account_deletion: 0,
      account_anonymization: 0,
    });
    expect(await count('select count(*) as n from internal.process_pruned')).toBe(0);
  });

  it('each domain prunes its finished roots past the window, with their facts; unfinished roots stay', async () => {
    await db.query(
      `insert into internal.process_retention (process, retention)
       select p, interval '7 days' from unnest(array['send_email', 'send_sms', 'file_deletion', 'account_deletion', 'account_anonymization']) p`,
    );
    const pending = await sendEmail('later@example.com'); // not driven: still running
    expect(await prune('comms', "now() + interval '6 days'")).toEqual({ send_email: 0, send_sms: 0 });

    const messageId = (
      await db.query('select message_id from comms.send_email_task where send_email_task_id = $1', [email])
    ).rows[0].message_id;
    expect(await prune('comms', "now() + interval '8 days'")).toEqual({ send_email: 2, send_sms: 1 });
    expect(await count('select count(*) as n from comms.send_email_task where send_email_task_id = $1', [email])).toBe(
      0,
    );
    expect(
      await count('select count(*) as n from comms.send_email_attempt where send_email_task_id = $1', [email]),
    ).toBe(0);
    expect(await count('select count(*) as n from comms.message where message_id = $1', [messageId])).toBe(0);
    expect(await count('select count(*) as n from comms.send_sms_task where send_sms_task_id = $1', [sms])).toBe(0);
    expect(
      await count('select count(*) as n from comms.send_email_task where send_email_task_id = $1', [pending]),
    ).toBe(1);

    expect(await prune('files', "now() + interval '8 days'")).toEqual({ file_deletion: 1 });
    expect(await prune('accounts', "now() + interval '8 days'")).toEqual({
      account_deletion: 1,
      account_anonymization: 1,
    });
    expect(await count('select count(*) as n from accounts.account where account_id = $1', [deletion.account])).toBe(1);

    // The timeline says what was pruned; an id that never existed is still a 404.
    expect(await timeline('send_email', email)).toEqual([
      { fact: 'pruned', detail: { finished_before: expect.any(String), pruned_at: expect.any(String) } },
    ]);
    expect(await timeline('account_deletion', deletion.deletion)).toMatchObject([{ fact: 'pruned' }]);
    expect((await timeline('send_email', pending)).map((r) => r.fact)).toContain('started');
    await expect(timeline('send_email', 999999)).rejects.toMatchObject({ code: '23503' });

    // The worker can run it from a schedule; other roles cannot.
    const { rows } = await db
      .pool('worker')
      .query(`select internal.run_function('comms.prune_finished_processes', '{}'::jsonb) as r`);
    // A success envelope, as the worker's steps read it, with the counts as its payload.
    expect(rows[0].r).toEqual({ success: true, payload: { send_email: 0, send_sms: 0 } });
    const { rows: envelope } = await db
      .pool('worker')
      .query('select outcome from queues.parse_envelope($1::jsonb)', [rows[0].r]);
    expect(envelope[0].outcome).toBe('succeeded');
    await expect(db.pool('app').query(`select comms.prune_finished_processes('{}'::jsonb)`)).rejects.toMatchObject({
      code: '42501',
    });
    await expect(db.pool('worker').query(`select comms.prune_finished_processes_at(now(), 10)`)).rejects.toMatchObject({
      code: '42501',
    });
  });

  it('refuses bad arguments and writes nothing', async () => {
    await expect(
      db.query(`select * from internal.prune_finished_roots('comms', 'send_email', now(), 0)`),
    ).rejects.toMatchObject({ code: '22023' });
    await expect(
      db.query(`select * from internal.prune_finished_roots('comms', 'send_email', null, 10)`),
    ).rejects.toMatchObject({ code: '22004' });
    await db.query('delete from internal.process_retention');
    await expect(
      db.query(`insert into internal.process_retention (process, retention) values ('send_email_x', '1 day')`),
    ).rejects.toMatchObject({ code: '23514' });
    await expect(
      db.query(`insert into internal.process_retention (process, retention) values ('send_sms', '-1 day')`),
    ).rejects.toMatchObject({ code: '23514' });
    await expect(
      db.query(`insert into internal.process_retention (process, retention) values ('file_deletion', '0')`),
    ).rejects.toMatchObject({ code: '23514' });
    expect(await count('select count(*) as n from internal.process_retention')).toBe(0);
  });
});
