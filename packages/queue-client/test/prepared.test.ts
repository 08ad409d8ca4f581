// The generated queries run as prepared statements; a migration that changes a statement's
// result columns must not leave them refused for good.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { isResultTypeChange, prepared } from '../src/prepared.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await db.query(`
    create schema scratch;
    -- scratch.<_name>() returning one integer column per name in _columns (1, 2, ...).
    create function scratch.define(_name text, _columns text[]) returns void language plpgsql as $$
    begin
      execute format('drop function if exists scratch.%I()', _name);
      execute format('create function scratch.%I() returns table (%s) language sql as %L', _name,
                     (select string_agg(format('%I integer', c), ', ') from unnest(_columns) c),
                     'select ' || (select string_agg(i::text, ', ') from generate_series(1, cardinality(_columns)) i));
    end $$;`);
});
afterAll(async () => {
  await db?.drop();
});

/** scratch.<name>() returning the columns given (a migration replacing it). */
async function defineFunction(name: string, columns: string[]): Promise<void> {
  await db.query('select scratch.define($1, $2)', [name, columns]);
}

describe('prepared statements', () => {
  it('prepares a statement once per connection, under its name', async () => {
    await defineFunction('once', ['a']);
    const client = await db.client('owner');
    try {
      for (let i = 0; i < 3; i++) {
        const { rows } = await prepared('scratch_once', client).query('select * from scratch.once()');
        expect(rows).toEqual([{ a: 1 }]);
      }
      const { rows } = await client.query<{ name: string }>('select name from pg_prepared_statements');
      expect(rows).toHaveLength(1);
      expect(rows[0].name).toMatch(/^scratch_once/);
    } finally {
      await client.end();
    }
  });

  it('on a pool, runs a statement whose result columns a migration changed, at once', async () => {
    await defineFunction('pooled', ['a']);
    const pool = new pg.Pool({ connectionString: db.url('owner'), max: 1 });
    try {
      const statement = prepared('scratch_pooled', pool);
      expect((await statement.query('select * from scratch.pooled()')).rows).toEqual([{ a: 1 }]);
      // The pool's one connection prepared it; PostgreSQL refuses it from now on (the
      // client test below shows the refusal), and the call is made again under a new name.
      await defineFunction('pooled', ['a', 'b']);
      expect((await statement.query('select * from scratch.pooled()')).rows).toEqual([{ a: 1, b: 2 }]);
      expect((await statement.query('select * from scratch.pooled()')).rows).toEqual([{ a: 1, b: 2 }]);
    } finally {
      await pool.end();
    }
  });

  it('on a client, refuses the one call (its transaction is aborted), then runs the next', async () => {
    await defineFunction('single', ['a']);
    const client = await db.client('owner');
    try {
      const statement = prepared('scratch_single', client);
      expect((await statement.query('select * from scratch.single()')).rows).toEqual([{ a: 1 }]);
      await defineFunction('single', ['a', 'b']);
      await client.query('begin');
      const refused = await statement.query('select * from scratch.single()').then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(isResultTypeChange(refused)).toBe(true);
      await client.query('rollback');
      expect((await statement.query('select * from scratch.single()')).rows).toEqual([{ a: 1, b: 2 }]);
    } finally {
      await client.end();
    }
  });

  it('tells that refusal from other errors', async () => {
    const client = await db.client('owner');
    try {
      const error = await client.query('select 1/0').then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isResultTypeChange(error)).toBe(false);
      expect(isResultTypeChange(new Error('cached plan must not change result type'))).toBe(false);
      // The same SQLSTATE and message, raised by code rather than by the plan cache.
      const raised = await client
        .query(`do $$ begin raise exception 'cached plan must not change result type' using errcode = '0A000'; end $$`)
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect((raised as { code?: string }).code).toBe('0A000');
      expect(isResultTypeChange(raised)).toBe(false);
    } finally {
      await client.end();
    }
  });
});
