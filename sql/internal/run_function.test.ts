// internal.run_function: the worker's only way into business SQL. Happy path, the
// caller's own privileges, and a corpus of hostile names: each a clear error with
// nothing executed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  // Fixtures: a schema with functions that leave a trace when they run.
  await db.query(`
    create schema fixture;
    create table fixture.call (name text not null, payload jsonb);
    create function fixture.record(payload jsonb) returns jsonb
      language sql security definer set search_path = pg_catalog, pg_temp
      as $$ insert into fixture.call values ('record', payload) returning jsonb_build_object('success', true, 'payload', payload) $$;
    create function fixture.unregistered(payload jsonb) returns jsonb
      language sql security definer set search_path = pg_catalog, pg_temp
      as $$ insert into fixture.call values ('unregistered', payload) returning '{}'::jsonb $$;
    create function fixture.not_granted(payload jsonb) returns jsonb
      language sql security definer set search_path = pg_catalog, pg_temp
      as $$ insert into fixture.call values ('not_granted', payload) returning '{}'::jsonb $$;
    create function fixture.returns_text(payload jsonb) returns text language sql as $$ select 'x' $$;
    create function fixture.two_args(payload jsonb, n int) returns jsonb language sql as $$ select payload $$;
    revoke execute on all functions in schema fixture from public;
    grant usage on schema fixture to ${db.dbUsers.worker};
    grant execute on function fixture.record(jsonb), fixture.unregistered(jsonb) to ${db.dbUsers.worker};
    select internal.register_runnable_function('fixture.record(jsonb)');
    select internal.register_runnable_function('fixture.not_granted(jsonb)');
  `);
});
afterAll(async () => {
  await db?.drop();
});

const calls = async () => (await db.query('select count(*)::int as n from fixture.call')).rows[0].n as number;
const run = (name: unknown, payload: unknown = { id: 1 }) =>
  db.pool('worker').query('select internal.run_function($1, $2::jsonb) as result', [name, JSON.stringify(payload)]);

describe('run_function', () => {
  it('runs a registered function the caller may execute and returns its jsonb', async () => {
    const before = await calls();
    const { rows } = await run('fixture.record', { send_email_task_id: 7 });
    expect(rows[0].result).toEqual({ success: true, payload: { send_email_task_id: 7 } });
    expect(await calls()).toBe(before + 1);
  });

  it('runs internal.noop, registered by the migrations', async () => {
    expect((await run('internal.noop')).rows[0].result).toEqual({ success: true });
  });

  const hostile: [string, unknown, string, RegExp][] = [
    ['unknown name', 'fixture.nope', '42883', /function fixture\.nope\(jsonb\) does not exist/],
    ['unknown schema', 'nowhere.record', '42883', /does not exist/],
    ['argument list', 'fixture.record(jsonb)', '22023', /invalid function_name/],
    ['pg_catalog.pg_sleep', 'pg_catalog.pg_sleep', '42501', /system or temporary schema and is never runnable/],
    ['pg_catalog.jsonb_pretty', 'pg_catalog.jsonb_pretty', '42501', /never runnable/],
    ['pg_temp', 'pg_temp.anything', '42501', /never runnable/],
    ['pg_temp_3', 'pg_temp_3.anything', '42501', /never runnable/],
    ['information_schema', 'information_schema._pg_truetypid', '42501', /never runnable/],
    ['no schema', 'record', '22023', /invalid function_name/],
    ['double quotes', '"fixture"."record"', '22023', /invalid function_name/],
    ['single quote', "fixture.record'", '22023', /invalid function_name/],
    ['semicolon', 'fixture.record; drop table fixture.call', '22023', /invalid function_name/],
    ['comment', 'fixture.record--', '22023', /invalid function_name/],
    ['leading whitespace', ' fixture.record', '22023', /invalid function_name/],
    ['trailing newline', 'fixture.record\n', '22023', /invalid function_name/],
    ['inner whitespace', 'fixture. record', '22023', /invalid function_name/],
    ['upper case', 'Fixture.Record', '22023', /invalid function_name/],
    ['three parts', 'db.fixture.record', '22023', /invalid function_name/],
    ['an OID', '12345', '22023', /invalid function_name/],
    ['empty', '', '22023', /invalid function_name/],
    ['unicode look-alike', 'fixture.reсord', '22023', /invalid function_name/],
    ['real but unregistered', 'fixture.unregistered', '42501', /fixture\.unregistered is not registered as runnable/],
    ['registered but not granted', 'fixture.not_granted', '42501', /may not execute fixture\.not_granted/],
    ['NULL', null, '22004', /function_name must not be null/],
  ];
  it.each(hostile)('%s: clear error, nothing executed', async (_name, name, code, message) => {
    const before = await calls();
    await expect(run(name)).rejects.toMatchObject({ code, message: expect.stringMatching(message) });
    expect(await calls()).toBe(before);
  });

  it('the worker cannot plant a pg_temp function to be found by name', async () => {
    // TEMP is revoked on the database, so the attempt fails before any lookup.
    await expect(
      db
        .pool('worker')
        .query(`create function pg_temp.record(payload jsonb) returns jsonb language sql as $$ select '{}'::jsonb $$`),
    ).rejects.toMatchObject({
      code: '42501',
      message: expect.stringMatching(/permission denied to create temporary tables/),
    });
  });

  it('register_runnable_function accepts only name(jsonb) returning jsonb outside system schemas', async () => {
    const cases: [string, RegExp][] = [
      ['fixture.returns_text(jsonb)', /must be a function taking one jsonb argument and returning jsonb/],
      ['fixture.two_args(jsonb, integer)', /must be a function taking one jsonb argument/],
      ['pg_catalog.jsonb_pretty(jsonb)', /functions in pg_catalog cannot be runnable/],
    ];
    for (const [fn, message] of cases) {
      await expect(db.query('select internal.register_runnable_function($1::regprocedure)', [fn])).rejects.toThrow(
        message,
      );
    }
    // Only the owner registers: the worker may not extend its own allowlist.
    await expect(
      db.pool('worker').query(`select internal.register_runnable_function('fixture.unregistered(jsonb)')`),
    ).rejects.toMatchObject({ code: '42501' });
  });
});
