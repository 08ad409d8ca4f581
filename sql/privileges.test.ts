// The privilege sweep, read from the catalog: what each role can reach equals what it
// is meant to reach, and the security-definer rules hold for every function we own.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

const allowlist = JSON.parse(readFileSync(new URL('./database-user-grants.json', import.meta.url), 'utf8')) as Record<
  'worker' | 'app' | 'api' | 'worker_only_task_types' | 'api_views',
  string[]
>;

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** Our schemas: everything but PostgreSQL's own and graphile-migrate's. */
const OURS = `n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast', 'graphile_migrate')
              and n.nspname not like 'pg\\_temp\\_%' and n.nspname not like 'pg\\_toast\\_temp\\_%'`;

describe.each(['worker', 'app', 'api'] as const)('%s database user', (dbUser) => {
  it('has no privilege on any table, view or sequence but SELECT on the views of sql/database-user-grants.json', async () => {
    const { rows } = await db.query(
      `select format('%I.%I', n.nspname, c.relname) as relation, c.relkind
         from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where ${OURS} and c.relkind in ('r', 'v', 'm', 'p', 'f', 'S')
          and (case when c.relkind = 'S'
                    then has_sequence_privilege($1, c.oid, 'usage, select, update')
                    else has_table_privilege($1, c.oid, 'select, insert, update, delete, truncate, references, trigger')
               end)`,
      [db.dbUsers[dbUser]],
    );
    const views = dbUser === 'api' ? allowlist.api_views : [];
    expect(rows).toEqual(views.map((relation) => ({ relation, relkind: 'v' })));
    if (views.length > 0) {
      // SELECT only: a view that could be written would write the owner's tables.
      const { rows: writable } = await db.query(
        `select v from unnest($2::text[]) v
          where has_table_privilege($1, v::regclass, 'insert, update, delete, truncate, references, trigger')`,
        [db.dbUsers[dbUser], views],
      );
      expect(writable).toEqual([]);
    }
    // And the catalog is right: a direct read is refused.
    await expect(db.pool(dbUser).query('select * from queues.task limit 1')).rejects.toMatchObject({ code: '42501' });
  });

  it('may execute exactly the functions in sql/database-user-grants.json', async () => {
    const { rows } = await db.query<{ fn: string }>(
      `select p.oid::regprocedure::text as fn
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where ${OURS} and has_function_privilege($1, p.oid, 'execute')
        order by 1`,
      [db.dbUsers[dbUser]],
    );
    expect(rows.map((r) => r.fn).sort()).toEqual([...allowlist[dbUser]].sort());
  });

  it('cannot create temporary objects', async () => {
    await expect(db.pool(dbUser).query('create temp table shadow (x int)')).rejects.toMatchObject({
      code: '42501',
      message: expect.stringMatching(/permission denied to create temporary tables/),
    });
    await expect(
      db.pool(dbUser).query(`create function pg_temp.evil(jsonb) returns jsonb language sql as $$ select $1 $$`),
    ).rejects.toMatchObject({ code: '42501' });
  });
});

describe.each(['app', 'api'] as const)('%s database user and task types', (dbUser) => {
  it('may enqueue every task type but the worker-only ones of sql/database-user-grants.json', async () => {
    const types = (await db.query<{ task_type: string }>('select task_type from queues.task_type order by 1')).rows.map(
      (r) => r.task_type,
    );
    const refused: string[] = [];
    const client = await db.pool(dbUser).connect();
    try {
      for (const t of types) {
        await client.query('begin');
        try {
          await client.query('select queues.enqueue($1, $2::jsonb)', [t, '{}']);
        } catch (e) {
          expect((e as { code?: string }).code, t).toBe('42501');
          refused.push(t);
        } finally {
          await client.query('rollback');
        }
      }
    } finally {
      client.release();
    }
    expect(refused).toEqual(allowlist.worker_only_task_types);
    const internal = (
      await db.query<{ task_type: string }>('select task_type from queues.internal_task_type order by 1')
    ).rows;
    expect(internal.map((r) => r.task_type)).toEqual(allowlist.worker_only_task_types);
  });
});

describe('functions we own', () => {
  it('PUBLIC may execute none of them', async () => {
    const { rows } = await db.query(
      `select p.oid::regprocedure::text as fn
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where ${OURS}
          and (p.proacl is null -- the default ACL grants EXECUTE to PUBLIC
               or exists (select 1 from aclexplode(p.proacl) a where a.grantee = 0 and a.privilege_type = 'EXECUTE'))`,
    );
    expect(rows).toEqual([]);
  });

  it('every security definer function pins search_path, with pg_temp last', async () => {
    const { rows } = await db.query<{ fn: string; config: string[] | null }>(
      `select p.oid::regprocedure::text as fn, p.proconfig as config
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where ${OURS} and p.prosecdef`,
    );
    expect(rows.length).toBeGreaterThan(5);
    const unpinned = rows.filter((r) => {
      const setting = (r.config ?? []).find((c) => c.startsWith('search_path='));
      return !setting || !/(^|, *)pg_temp$/.test(setting.slice('search_path='.length));
    });
    expect(unpinned).toEqual([]);
  });

  it('PUBLIC may not create in, or use, our schemas; TEMP and CONNECT are revoked on the database', async () => {
    const { rows: schemas } = await db.query(
      `select n.nspname from pg_namespace n
        where ${OURS} and n.nspname <> 'public'
          and (has_schema_privilege('public', n.oid, 'create') or has_schema_privilege('public', n.oid, 'usage'))`,
    );
    expect(schemas).toEqual([]);
    const { rows: database } = await db.query(
      `select has_database_privilege('public', current_database(), 'temp') as temp,
              has_database_privilege('public', current_database(), 'connect') as connect`,
    );
    expect(database[0]).toEqual({ temp: false, connect: false });
  });

  it('owner-only functions (the claim that takes a clock, maintenance) are refused to the worker', async () => {
    await expect(
      db.pool('worker').query(`select queues.claim_tasks_at(now() + interval '1 day', 'w', 1, null, 60, 5)`),
    ).rejects.toMatchObject({
      code: '42501',
    });
    await expect(db.pool('worker').query(`select queues.rebuild_task_pending()`)).rejects.toMatchObject({
      code: '42501',
    });
  });
});
