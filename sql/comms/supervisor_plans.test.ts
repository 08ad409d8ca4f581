// What a supervisor run costs the database: a channel process's supervisor, facts,
// closing of attempts the queue gave up on and handlers' bookkeeping are static SQL in
// the process's own functions (internal.create_channel_process_functions), planned once
// per connection, and that one plan keeps reading by key after the tables grew under it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, explainNested, planNodes, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const sendEmails = async (n: number): Promise<number[]> => {
  const { rows } = await db.pool('app').query<{ id: number }>(
    `select (comms.send_email('Team <team@example.com>', 'user' || g || '@example.com', 'Hello', '<p>Hi</p>'))
              .send_email_task_id::int as id
       from generate_series(1, $1::int) g`,
    [n],
  );
  return rows.map((r) => r.id);
};

/** Rows a plan's scans of `table` returned or read and threw away, over all their loops. */
const rowsRead = (plans: Awaited<ReturnType<typeof explainNested>>, table: string) =>
  plans
    .flatMap(({ plan }) => planNodes(plan))
    .filter((n) => n['Relation Name'] === table && n['Node Type'] !== 'ModifyTable')
    .reduce(
      (sum, n) =>
        sum +
        (Number(n['Actual Rows'] ?? 0) + Number(n['Rows Removed by Filter'] ?? 0)) * Number(n['Actual Loops'] ?? 1),
      0,
    );

describe('channel process functions', () => {
  it('every registered process has its own functions, which nobody but the owner may call', async () => {
    const functions = [
      ['_process_facts', 'bigint'],
      ['_close_given_up_attempts', 'bigint'],
      ['_supervise', 'jsonb'],
      ['_attempt_refusal', 'bigint, text'],
      ['_record_attempt_success', 'jsonb'],
      ['_record_attempt_failure', 'jsonb'],
    ];
    const { rows } = await db.query<{ fn: string; exists: boolean; public: boolean; worker: boolean }>(
      `with f as (
         select format('%s.%s', p.process_schema, p.process_name || f.suffix) as fn,
                to_regprocedure(format('%I.%I(%s)', p.process_schema, p.process_name || f.suffix, f.args)) as oid
           from internal.channel_process p
          cross join jsonb_to_recordset($2::jsonb) f(suffix text, args text))
       select fn, oid is not null as exists,
              has_function_privilege('public', oid, 'execute') as public,
              has_function_privilege($1, oid, 'execute') as worker
         from f order by 1`,
      [db.dbUsers.worker, JSON.stringify(functions.map(([suffix, args]) => ({ suffix, args })))],
    );
    const processes = ['comms.send_email', 'comms.send_sms', 'files.file_deletion'];
    expect(rows.map((r) => [r.fn, r.exists])).toEqual(
      processes.flatMap((p) => functions.map(([suffix]) => [p + suffix, true])).sort(),
    );
    expect(rows.filter((r) => r.public !== false || r.worker !== false)).toEqual([]);
  });

  it('registration on a run table without next_task_id (an older create_channel_process_tables) adds it', async () => {
    await db.query('create schema if not exists plans_probe');
    await db.query('create table plans_probe.bare_task (bare_task_id bigint generated always as identity primary key)');
    await db.query(`select internal.create_channel_process_tables('plans_probe', 'bare')`);
    await db.query('alter table plans_probe.bare_supervisor_run drop column next_task_id');
    await db.query(
      `select internal.register_channel_process('plans_probe', 'bare', 'email', 'plans_probe.s', 'plans_probe.b', 'plans_probe.ok', 'plans_probe.err', 3, 30)`,
    );
    const { rows } = await db.query(
      `select a.attname from pg_attribute a
        where a.attrelid = 'plans_probe.bare_supervisor_run'::regclass and a.attname = 'next_task_id' and not a.attisdropped`,
    );
    expect(rows).toEqual([{ attname: 'next_task_id' }]);
    const registered = await db.query(
      `select process_name from internal.channel_process where process_schema = 'plans_probe'`,
    );
    expect(registered.rows).toEqual([{ process_name: 'bare' }]);
  });

  it('a connection plans the facts once, and that plan reads by key after the tables grew', async () => {
    const [first] = await sendEmails(1);
    const root = await db.client('root');
    try {
      // The plans are made now, while the process tables hold one root and no attempt.
      const facts = (id: number) =>
        root.query('select * from internal.channel_process_facts($1, $2, $3)', ['comms', 'send_email', id]);
      const close = (id: number) => root.query('select comms.send_email_close_given_up_attempts($1) as n', [id]);
      expect((await facts(first)).rows[0]).toMatchObject({ num_attempts: 0, has_success: false });
      expect((await close(first)).rows[0].n).toBe(0);

      // Then 2,000 roots, each with an attempt that succeeded and one that failed.
      const ids = await sendEmails(2_000);
      await db.query(
        `insert into comms.send_email_attempt (send_email_task_id) select unnest($1::bigint[]) from generate_series(1, 2)`,
        [ids],
      );
      await db.query(
        `insert into comms.send_email_attempt_succeeded (send_email_attempt_id)
         select min(send_email_attempt_id) from comms.send_email_attempt group by send_email_task_id`,
      );
      await db.query(
        `insert into comms.send_email_attempt_failed (send_email_attempt_id, error_message)
         select max(send_email_attempt_id), 'provider said no' from comms.send_email_attempt group by send_email_task_id`,
      );
      await db.query(
        'analyze comms.send_email_attempt, comms.send_email_attempt_succeeded, comms.send_email_attempt_failed',
      );

      const last = ids[ids.length - 1];
      const plans = await explainNested(root, 'select * from internal.channel_process_facts($1, $2, $3)', [
        'comms',
        'send_email',
        last,
      ]);
      expect(plans.some((p) => p.query.includes('send_email_attempt_succeeded'))).toBe(true);
      for (const table of ['send_email_attempt', 'send_email_attempt_succeeded', 'send_email_attempt_failed'])
        expect(rowsRead(plans, table), `${table} rows read for one root's facts`).toBeLessThanOrEqual(2);
      const closing = await explainNested(root, 'select comms.send_email_close_given_up_attempts($1)', [last]);
      for (const table of ['send_email_attempt', 'send_email_attempt_succeeded', 'send_email_attempt_failed'])
        expect(rowsRead(closing, table), `${table} rows read closing one root's attempts`).toBeLessThanOrEqual(2);

      // The facts are right for the grown root: two attempts, one succeeded, one failed.
      expect((await facts(last)).rows[0]).toMatchObject({
        has_success: true,
        num_attempts: 2,
        num_failures: 1,
        num_outstanding: 0,
        has_unknown_outcome: false,
      });
      // And the connection kept the plans: the statements are in its plan cache, not
      // planned again on each call as dynamic SQL would be.
      const { rows: cached } = await root.query<{ n: number }>(
        `select count(*)::int as n from pg_backend_memory_contexts
          where name = 'CachedPlanSource' and ident like '%send_email_attempt_succeeded%'`,
      );
      expect(cached[0].n, 'cached plans that read send_email_attempt_succeeded').toBeGreaterThanOrEqual(2);
    } finally {
      await root.end();
    }
  });
});
